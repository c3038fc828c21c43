"""The records a recalibration fits (:mod:`rlops.pipeline_steps.drift.calibrate`): the fields, the
simulation profile and the populations fitted from live trace rows (:class:`CalibrationFit`, whose
:meth:`CalibrationFit.as_dict` is the calibration document the pack reads), and the outcome scores
rescaled to live (:class:`RewardScales`, the document's ``rewards:`` block)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlops.pipeline_steps.drift.mixture import MixtureFit
from rlops.sandbox.profiles import CALIBRATED

PROFILE = CALIBRATED  # the profile a calibration writes


@dataclass(frozen=True)
class FieldFit:
    """One field refitted from live: its initial values counted, as declared and as fitted."""

    n: int
    declared: dict[str, Any]
    """The distribution the pack declares (``dist`` and its parameters)."""
    fitted: dict[str, Any]
    """The distribution fitted by maximum likelihood within the declared family."""

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "declared": self.declared, "fitted": self.fitted}


@dataclass(frozen=True)
class CalibrationFit:
    """What live trace rows fit, before the fit is checked against live and written; :meth:`as_dict`
    is the calibration document the pack reads (``fields``, ``simulation``, ``fit``, ``population``)."""

    fields: dict[str, dict[str, Any]]
    """Per field path, its fitted distribution (``dist`` and parameters), as the pack reads it."""
    profile: dict[str, Any]
    """The ``calibrated`` simulation profile: latency jitter and error rates fitted from live."""
    field_fits: dict[str, FieldFit]
    skipped: dict[str, str]
    """Fields not fitted, with why."""
    simulation_fit: dict[str, Any]
    """What the simulation profile was fitted from."""
    rows: int
    episodes: int
    mixture_features: list[str]
    """The fields the mixture of populations is fitted on."""
    mixture: MixtureFit | None
    """The populations live traffic mixes (None: one population)."""
    population: list[dict[str, Any]] | None
    """One population segment per mixture component, its fields refitted on its episodes (None: one population)."""

    def as_dict(self) -> dict[str, Any]:
        mix = self.mixture
        out: dict[str, Any] = {
            "fields": dict(self.fields),
            "simulation": {"profiles": {PROFILE: self.profile}},
            "fit": {
                "fields": {path: fit.as_dict() for path, fit in self.field_fits.items()},
                "skipped": dict(self.skipped),
                "simulation": self.simulation_fit,
                "rows": self.rows,
                "episodes": self.episodes,
                "mixture": {
                    "features": self.mixture_features,
                    "components": mix.components if mix else 1,
                    "bic": mix.bic if mix else {},
                    "weights": mix.weights if mix else [1.0],
                },
            },
        }
        if self.population is not None:
            out["population"] = self.population
        return out


@dataclass(frozen=True)
class RewardScales:
    """The calibration's ``rewards:`` block: the declared outcome scores rescaled to live."""

    scales: dict[str, dict[str, dict[str, Any]]]
    """Per reward component and sign (``negative``/``positive``): the live/sandbox ``factor``, its
    ``p_value``, the rows compared and their means (see
    :func:`rlops.pipeline_steps.drift.outcome_fit.fit_reward_scales`). Empty: none rescaled."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.scales)


__all__ = ["PROFILE", "CalibrationFit", "FieldFit", "RewardScales"]

"""Population segments for a calibration: live traffic is often a mixture of populations (the
credit pack's ``live`` profile draws 15% of its applicants from an elderly segment, with their
own age, employment and income), and one distribution per field cannot reproduce a bimodal age.

A Gaussian mixture with diagonal covariances is fitted to the per-episode initial values of the
*mixture features* — the fitted ``normal`` fields and the logs of the ``lognormal`` fields that
every episode shows from its first step — for 1 … ``max_components`` components; the number of
components is the one with the lowest BIC among the fits whose every component holds at least
``min_component_weight`` of the episodes (a clamped bound such as age 18 must not become a
segment of its own). Each component becomes one population segment of the ``calibrated``
profile, with probability its mixture weight; every fitted field of the segment is refitted in
its declared family, each episode weighted by its responsibility for that component (so
categorical fields such as employment follow the segment too). One component means no
segments: the calibration is the plain per-field fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.pipeline_steps.drift.field_fits import fit_field

if TYPE_CHECKING:
    import pandas as pd

    from rlops.sandbox.pack import Pack


@dataclass(frozen=True)
class MixtureFit:
    """The chosen mixture: weights, per-episode responsibilities and the BIC of every K tried."""

    weights: list[float]
    responsibilities: pd.DataFrame  # index: episode id, one column per component
    features: list[str]
    bic: dict[int, float]

    @property
    def components(self) -> int:
        return len(self.weights)


def mixture_features(pack: Pack, fitted: dict[str, dict[str, Any]]) -> list[str]:
    """Fitted ``normal``/``lognormal`` fields visible from the first step of every episode."""
    fields = pack.scenario.fields
    return [
        p for p, spec in fitted.items() if spec["dist"] in ("normal", "lognormal") and fields[p].visible_when is None
    ]


def fit_mixture(
    values: dict[str, pd.Series],
    fitted: dict[str, dict[str, Any]],
    features: list[str],
    max_components: int,
    min_weight: float,
    seed: int,
) -> MixtureFit | None:
    """The mixture of the features' initial values with the lowest admissible BIC; None when
    fewer than two features' worth of data or ``max_components`` < 2."""
    import numpy as np
    import pandas as pd
    from sklearn.mixture import GaussianMixture

    if not features or max_components < 2:
        return None
    table = pd.concat({p: values[p] for p in features}, axis=1).dropna()
    for p in features:
        if fitted[p]["dist"] == "lognormal":
            table = table[table[p] > 0]
            table[p] = np.log(table[p])
    if len(table) < 20 * max_components:
        return None
    X = table.to_numpy(np.float64)
    X = (X - X.mean(axis=0)) / np.maximum(X.std(axis=0), 1e-9)
    best: tuple[float, Any] | None = None
    bic: dict[int, float] = {}
    for k in range(1, max_components + 1):
        gm = GaussianMixture(k, covariance_type="diag", reg_covar=1e-4, n_init=2, random_state=seed).fit(X)
        bic[k] = float(gm.bic(X))
        if k > 1 and float(gm.weights_.min()) < min_weight:
            continue
        if best is None or bic[k] < best[0]:
            best = (bic[k], gm)
    gm = best[1] if best else None
    if gm is None or gm.n_components == 1:
        return None
    order = np.argsort(-gm.weights_)  # largest segment first: the same fit gives the same order
    resp = pd.DataFrame(gm.predict_proba(X)[:, order], index=table.index)
    return MixtureFit([float(w) for w in gm.weights_[order]], resp, list(features), bic)


def segment_population(
    pack: Pack, values: dict[str, pd.Series], fitted: dict[str, dict[str, Any]], mix: MixtureFit, min_rows: int
) -> list[dict[str, Any]]:
    """One population segment per mixture component, every fitted field refitted in it with the
    episodes weighted by their responsibility (a field with fewer than ``min_rows`` weighted
    values in a segment, and every ``uniform`` field, keeps its one-population fit)."""
    import numpy as np

    fields = pack.scenario.fields
    weights = _probabilities(mix.weights)
    segments = []
    for k, prob in enumerate(weights):
        init: dict[str, Any] = {}
        for path, spec in fitted.items():
            s = values[path].dropna()
            r = mix.responsibilities[k].reindex(s.index).to_numpy(np.float64)
            known = np.isfinite(r)
            if spec["dist"] == "uniform" or float(r[known].sum()) < min_rows:
                init[path] = spec
                continue
            init[path] = fit_field(fields[path], s.to_numpy(np.float64)[known], r[known])
        segments.append({"name": f"fitted{k + 1}", "probability": prob, "init": init})
    return segments


def _probabilities(weights: list[float]) -> list[float]:
    """Mixture weights as segment probabilities that sum to exactly 1 (no base population left)."""
    rounded = [round(w, 6) for w in weights[:-1]]
    return rounded + [max(0.0, 1.0 - sum(rounded))]


def drop_fields(population: list[dict[str, Any]], paths: set[str]) -> list[dict[str, Any]]:
    """The segments without ``paths`` (fields whose fit was refused)."""
    return [{**seg, "init": {p: v for p, v in seg["init"].items() if p not in paths}} for seg in population]


__all__ = ["MixtureFit", "drop_fields", "fit_mixture", "mixture_features", "segment_population"]

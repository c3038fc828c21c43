"""What an evaluation is asked to do: the options of ``rlops model evaluate`` (and of ``rlops model
promote``, which evaluates before it moves an alias), declared once (see
:mod:`rlops.common.step_request`). The promote DAG's run is :class:`PromoteRequest`: its
``candidate`` takes only a version (the webhook sends the version an alias pointed at); ``rlops
model promote`` takes the evaluation's ``--candidate`` and ``--episodes`` (a version or an alias)
and the promotion's other options (``--staged``).

``rlops model evaluate`` runs one of two requests: :class:`EvaluateRequest` (``--candidate``: the
gated comparison with the champion) or :class:`OffPolicyRequest` (``--target``: any target's
off-policy estimate on logged traffic, no gates); the flag given picks it. A roll-out tick (``rlops
model rollout``, the roll-out DAG) is :class:`RolloutRequest`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlops.common.step_request import option, overlay

if TYPE_CHECKING:  # the params model (pydantic) is not imported while the command line is parsed
    from rlops.common.params_operations import RolloutParams


@dataclass(frozen=True)
class EvaluateRequest:
    """One evaluation's options; ``None`` leaves an option to params ``evaluate:``. The step checks
    every value, given or from params, the same way."""

    candidate: str = option(
        required=True,
        dag=False,
        digest=False,
        help="registered policy version to judge",
    )
    episodes: int | None = option(
        None,
        dag=False,
        digest=False,
        help="held-out episodes (default: params evaluate.episodes)",
    )


#: A policy version as the promote DAG's conf names it: ``3``, ``v3`` or ``<pack>-policy/3``.
VERSION_PATTERN = r"v?\d+|[A-Za-z0-9_.-]+-policy/v?\d+"


@dataclass(frozen=True)
class PromoteRequest:
    """A gated promotion of one registered version, as the promote DAG is triggered with it (by the
    webhook receiver when an alias is set in the MLflow UI, by a user, by the timeline)."""

    candidate: str = option(
        "1",
        pattern=VERSION_PATTERN,
        cli=False,  # the command's --candidate is the evaluation's, which also takes an alias
        digest=False,
        help="policy version to judge and promote (3 or <pack>-policy/3)",
    )
    requested_by: str = option(
        "airflow",
        max_length=200,
        cli=False,
        digest=False,
        help="who asked: mlflow-ui-alias, manual-champion, airflow",
    )
    staged: bool | None = option(
        None,
        digest=False,
        help="roll out as challenger through params evaluate.rollout_stages instead of switching at once; "
        "false (--no-staged): champion at once (default: params promotion.staged)",
    )


#: The longest window of logged traffic ``--window-hours`` reads: ten years.
MAX_WINDOW_HOURS = 24 * 366 * 10


@dataclass(frozen=True)
class RolloutRequest:
    """One roll-out tick's options (``rlops model rollout`` and the roll-out DAG); ``None`` leaves an
    option to params ``rollout:``."""

    min_stage_minutes: float | None = option(
        None,
        minimum=0,
        maximum=MAX_WINDOW_HOURS * 60,
        digest=False,
        help="minutes a stage serves before its live A/B gates can move it on (default: params "
        "rollout.min_stage_minutes)",
    )
    regression_window_hours: float | None = option(
        None,
        minimum=0.25,
        maximum=MAX_WINDOW_HOURS,
        digest=False,
        help="hours of live traffic in which a champion without a challenger is checked for a regression "
        "(default: params rollout.regression_window_hours)",
    )

    def settings(self, params: RolloutParams) -> RolloutParams:
        """The ``rollout:`` params block with this request's options over it: what the tick uses."""
        return overlay(self, params)


@dataclass(frozen=True)
class OffPolicyRequest:
    """One off-policy estimate of a target on the logged live traffic of a window (a report, not a
    gate: :func:`rlops.pipeline_steps.promotion.ope_targets.evaluate_target`)."""

    target: str = option(
        required=True,
        dag=False,
        digest=False,
        help="estimate this target on logged live traffic instead (no gates): rules | uniform | a version or "
        "alias (3, champion) | a file of per-row action probabilities (.parquet, .csv, .jsonl: trace_id, "
        "optionally step, and one column per action)",
    )
    window_hours: float | None = option(
        None,
        minimum=0.25,
        maximum=MAX_WINDOW_HOURS,
        dag=False,
        digest=False,
        help="hours of logged traffic up to the run key's end (default: params ope.window_hours)",
    )
    greedy: bool = option(
        False,
        dag=False,
        digest=False,
        help="the target's choice alone, without the exploration share it serves with (rules, a version)",
    )
    direct_method: str | None = option(
        None,
        choices=("sandbox", "reward_model", "none"),
        dag=False,
        digest=False,
        help="DR's direct method (default: params ope.direct_method; a file target has none in the sandbox)",
    )


__all__ = [
    "MAX_WINDOW_HOURS",
    "VERSION_PATTERN",
    "EvaluateRequest",
    "OffPolicyRequest",
    "PromoteRequest",
    "RolloutRequest",
]

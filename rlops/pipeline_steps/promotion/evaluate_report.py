"""What an evaluation reports: the :class:`EvaluationReport` of a candidate judged gate by gate,
and its record (:func:`record_evaluation`) — the gate table (JSON, HTML) and summary under
``reports/evaluate/<scenario>/<run_key>/v<candidate>/``, an ``evaluate-…`` MLflow run holding them
with the evaluation's params and metrics, and the verdict on the candidate's version (its tags and
the ``Gates:`` paragraph of its description).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.datasets import EVALUATION, calibration_dataset
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.promotion.gate_table import gate_frame, gate_table_html, with_gate_summary
from rlops.pipeline_steps.promotion.gates import Gate
from rlops.registry import tags as T
from rlops.registry.client import policy_model_name
from rlops.registry.datasets import log_dataset_inputs

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.services import StepServices


@dataclass(frozen=True)
class EvaluationReport(StepResult):
    """A candidate judged against the champion (or the rule engine), gate by gate."""

    scenario: str
    run_key: str
    candidate: str
    champion_version: str | None
    """The champion when the evaluation began (None: none; the rule engine was the baseline)."""
    baseline: str
    """What the candidate was compared with: ``champion v<N>`` or ``rules``."""
    passed: bool
    failed_gates: list[str]
    episodes: int
    seed: int
    profile: str
    reward_fn: str
    notes: list[str]
    candidate_summary: dict[str, float]
    champion_summary: dict[str, float]
    gates: list[dict[str, Any]]
    """One row per gate: its value for both, threshold, state and detail."""
    dry_run: bool
    candidate_metrics: dict[str, float]
    ope_metrics: dict[str, float]
    ope_params: dict[str, str]
    ope_tags: dict[str, str]
    evidence: dict[str, Any]
    """What the evidence allows (:class:`rlops.pipeline_steps.promotion.evidence.Evidence`)."""
    hold: str | None
    """Why a passing candidate may go at most to the canary stage (None: full traffic)."""
    report_uri: str | None = None
    """The folder of the gate table (JSON, HTML) and summary (None: a dry run writes none)."""
    eval_run_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A dry run's JSON has no report or run to name."""
        out = super().as_dict()
        return {k: v for k, v in out.items() if not (k in ("report_uri", "eval_run_id") and v is None)}


def rounded(d: dict[str, Any]) -> dict[str, Any]:
    """A summary with its floats to six places, as the report keeps them."""
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}


def record_evaluation(ctx: StepServices, report: dict[str, Any], gates: list[Gate]) -> tuple[str, str]:
    """Write the gate table to storage and to an MLflow run; tag the candidate with the verdict.
    Returns the report's folder and the evaluation run's id."""
    cand = report["candidate"]
    title = f"{ctx.scenario}: policy v{cand} vs {report['baseline']}"
    facts = {k: report[k] for k in ("passed", "episodes", "seed", "profile", "reward_fn", "run_key")}
    page = gate_table_html(gates, title, {**facts, "notes": "; ".join(report["notes"])})
    table = gate_frame(gates)
    table_json = {
        "columns": list(table.columns),
        "data": table.astype(object).where(table.notna(), None).values.tolist(),
    }
    uri = ctx.report_uri("evaluate", f"v{cand}")
    ctx.storage.write_json(f"{uri}/gates.json", table_json)
    ctx.storage.write_text(f"{uri}/gates.html", page)
    ctx.storage.write_json(f"{uri}/summary.json", {k: v for k, v in report.items() if k != "gates"})

    with step_run(
        ctx,
        T.EVALUATE,
        label=f"v{cand}",
        extra_tags={
            T.CANDIDATE: cand,
            T.BASELINE: report["baseline"],
            T.PASSED: str(report["passed"]).lower(),
            **(report.get("ope_tags") or {}),
        },
    ) as run:
        log_dataset_inputs(
            run,
            [
                calibration_dataset(
                    ctx.storage, ctx.uri("calibrations", ctx.scenario, "latest.json"), f"calibration-{ctx.scenario}"
                )
            ],
            EVALUATION,
        )
        run.log_params(
            {
                "episodes": report["episodes"],
                "seed": report["seed"],
                "profile": report["profile"],
                "reward_fn": report["reward_fn"],
                **(report.get("ope_params") or {}),
            }
        )
        metrics = dict(report["candidate_metrics"])
        metrics.update({f"candidate_{k}": float(v) for k, v in report["candidate_summary"].items()})
        metrics.update({f"champion_{k}": float(v) for k, v in report["champion_summary"].items()})
        metrics.update(report.get("ope_metrics") or {})
        run.log_metrics({k: v for k, v in metrics.items() if np.isfinite(v)}, step=0)
        run.log_dict(table_json, "gates.json")
        run.log_text(page, "gates.html")
    name = policy_model_name(ctx.scenario)
    ctx.tracker.set_model_version_tags(
        name,
        cand,
        {
            T.VERSION.EVAL_PASSED: str(report["passed"]).lower(),
            T.VERSION.EVAL_RUN_ID: run.run_id,
            T.VERSION.EVAL_BASELINE: report["baseline"],
        },
    )

    ctx.tracker.describe(name, cand, with_gate_summary(ctx.tracker.version_description(name, cand), report))
    return uri, run.run_id

"""``rlops train status``: the per-iteration metrics a policy training run logged to MLflow."""

from __future__ import annotations

from typing import Any

from pipeline_steps.infra.context import StepContext

STATUS_COLUMNS = ("episodic_return", "episodic_length", "entropy", "approx_kl", "value_loss",
                  "human_takeover_rate", "illegal_actions", "sps", "stagnation")


def train_status(ctx: StepContext, run_id: str, all_metrics: bool = False) -> dict[str, Any]:
    """The per-iteration metrics of a training run, one row per logged step."""
    def fetch(c: Any) -> dict[str, Any]:
        run = c.get_run(run_id)
        keys = sorted(run.data.metrics) if all_metrics else [k for k in STATUS_COLUMNS if k in run.data.metrics]
        rows: dict[int, dict[str, float]] = {}
        for key in keys:
            for m in c.get_metric_history(run_id, key):
                rows.setdefault(int(m.step), {})[key] = float(m.value)
        return {"run_id": run_id, "status": run.info.status, "run_name": run.info.run_name,
                "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
                "columns": ["step", *keys], "rows": [{"step": s, **rows[s]} for s in sorted(rows)]}
    return ctx.tracker._call(f"read metrics of run {run_id}", fetch)

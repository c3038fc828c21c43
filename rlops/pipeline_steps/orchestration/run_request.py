"""What a DAG run is asked to do beyond its steps' options, declared once (see
:mod:`rlops.common.step_request`): :class:`RunRequest` (every pack DAG) and :class:`RetrainRequest`
(the retrain DAGs). Their Airflow Params and the check of a triggered run's conf are generated from
them, as each step's are from its own request."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.step_request import option

#: The longest ``reason`` a run's conf may carry (free text; ``drift`` is the one value that changes
#: what a retrain does: :func:`rlops.pipeline_steps.orchestration.tasks.staged_promotion`).
MAX_REASON = 200
#: A data interval as a run's conf names it (see :class:`rlops.common.run_key.RunKey`).
RUN_KEY_PATTERN = r"\d{8}T\d{4}(-\d{1,5}m)?"


@dataclass(frozen=True)
class RunRequest:
    """The options every pack DAG's run accepts."""

    dry_run: bool = option(False, cli=False, digest=False, help="report what would change, write nothing")


@dataclass(frozen=True)
class RetrainRequest:
    """The options of a retrain run that are not the training's own (:class:`TrainRequest`)."""

    staged: bool | None = option(
        None,
        cli=False,
        digest=False,
        help="promote a passing candidate as staged challenger (null: params rollout.staged, "
        "rollout.staged_emergency for a retrain triggered by drift)",
    )
    run_key: str | None = option(
        None,
        pattern=RUN_KEY_PATTERN,
        cli=False,
        digest=False,
        help="the data interval this run owns, e.g. 20261130T0500 (null: the one its date says; "
        "an emergency retrain gets the drift run's)",
    )
    reason: str = option(
        "schedule",
        max_length=MAX_REASON,
        cli=False,
        digest=False,
        help="why this run, in a word or your own (schedule, drift: an emergency retrain, manual, "
        "or free text); kept with the run",
    )
    force: bool = option(
        False,
        cli=False,
        digest=False,
        help="retrain even when the inputs equal the last retrain's (dags.skip_unchanged skips it)",
    )


__all__ = ["MAX_REASON", "RUN_KEY_PATTERN", "RetrainRequest", "RunRequest"]

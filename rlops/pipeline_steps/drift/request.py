"""What a drift check is asked to do: the options of ``rlops drift check``, declared once (see
:mod:`rlops.common.step_request`). The drift monitor DAG offers those not marked ``dag=False``
(:data:`~rlops.pipeline_steps.orchestration.settings.DAG_REQUESTS`); ``episodes`` is the command's
only: the DAG's check rolls the baseline params ``drift.baseline_episodes`` ask for."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.step_request import option


@dataclass(frozen=True)
class DriftCheckRequest:
    """One drift check's options; ``None`` leaves an option to params ``drift:``. The step checks
    every value, given or from params, the same way."""

    episodes: int | None = option(
        None,
        dag=False,
        digest=False,
        help="sandbox baseline episodes (default: params drift.baseline_episodes)",
    )


__all__ = ["DriftCheckRequest"]

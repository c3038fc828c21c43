"""What a stress test is asked to do: the options of ``rlops stress`` and of the retrain DAGs'
``stress_test`` task, declared once (see :mod:`rlops.common.step_request`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.step_request import option


@dataclass(frozen=True)
class StressRequest:
    """One stress test's options; ``None`` leaves the reward function to the pack's params and
    stresses the reward function alone."""

    reward_fn: str | None = option(
        None,
        # The command declares --reward-fn itself (rlops.commands.common_args, shared with the other
        # commands; here it also takes a reward module file). The retrain DAGs pass on their conf's
        # reward_fn, whose Param and check are TrainRequest's.
        digest=False,
        help="reward function: a label of the pack (v1) or a reward module file (default: the pack's params.yaml "
        "'reward_fn', else the project's, else the pack's newest)",
    )
    policy_version: str | None = option(
        None,
        dag=False,  # the retrain DAG stresses the version its training task registered
        digest=False,
        help="version of <scenario>-policy (or a saved policy folder) to stress",
    )


__all__ = ["StressRequest"]

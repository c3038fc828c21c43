"""What a label-queue run is asked to do: the options of ``rlops labels run`` and of the label queue
DAG's ``enqueue_uncertain_states`` task, declared once (see :mod:`rlops.common.step_request`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlops.common.step_request import option, overlay
from rlops.pipeline_steps.promotion.request import MAX_WINDOW_HOURS

if TYPE_CHECKING:  # the params model (pydantic) is not imported while the command line is parsed
    from rlops.common.params_model import QueueConfig

SELECTIONS = ("auto", "entropy", "reward_ensemble")


@dataclass(frozen=True)
class LabelQueueRequest:
    """One label-queue run's options; ``None`` leaves an option to params ``label_queue:``."""

    traces: str | None = option(
        None,
        dag=False,  # the DAG reads the scenario's trace store
        digest=False,
        help="trace parquet file or folder (default: the scenario's trace store)",
    )
    window_hours: float | None = option(
        None,
        minimum=0.25,
        maximum=MAX_WINDOW_HOURS,
        digest=False,
        help="hours of traces ending with the run key's interval (default: params label_queue.window_hours)",
    )
    selection: str | None = option(
        None,
        choices=SELECTIONS,
        digest=False,
        help="how states are chosen: policy entropy per cluster, the reward ensemble's disagreement, or auto "
        "(the ensemble once there are label_queue.ensemble_min_labels labels) (default: params "
        "label_queue.selection)",
    )

    def settings(self, params: QueueConfig) -> QueueConfig:
        """The ``label_queue:`` params block with this request's options of the same name over it:
        what the run uses."""
        return overlay(self, params)


__all__ = ["SELECTIONS", "LabelQueueRequest"]

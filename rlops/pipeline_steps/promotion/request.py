"""What an evaluation is asked to do: the options of ``rlops model evaluate`` (and of ``rlops model
promote``, which evaluates before it moves an alias), declared once (see
:mod:`rlops.common.step_request`). The promote DAG's ``candidate`` is its own Param: it takes only
a version (the webhook sends the version an alias pointed at), the command also takes an alias."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.step_request import option


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


__all__ = ["EvaluateRequest"]

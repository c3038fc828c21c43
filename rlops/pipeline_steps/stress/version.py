"""The stress test of one registered policy version, before its gated promotion.

A version trained outside a retrain DAG (``rlops train policy``, a notebook) has no stress-test
verdict, and the ``stress_test`` gate fails it; a version promoted on request (the ``challenger``
alias set in the MLflow UI, the ``promote`` DAG) therefore has its own stress test run here when no
passing report of *that* version exists, and is gated on the verdict. A passing report counts only
when the version's ``stress_test`` tag says ``pass`` and the report its ``stress_report`` tag
points at names the same version: a report that cannot be read, or that another version's run
overwrote, is run again rather than trusted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rlops.pipeline_steps.stress.request import StressRequest
from rlops.pipeline_steps.stress.step import resolve_stress, run_stress
from rlops.registry import tags as T
from rlops.registry.client import policy_model_name
from rlops.storage.backend import StorageError

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices


@dataclass(frozen=True)
class VersionStress:
    """The stress-test verdict a promotion of ``version`` is gated on."""

    version: str
    verdict: str  # pass | fail
    ran: bool  # False: an earlier passing report of this version was used
    report_uri: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def passing_report(ctx: StepServices, version: str, tags: dict[str, str]) -> str | None:
    """The URI of a passing stress report of exactly ``version``, or None."""
    uri = tags.get(T.VERSION.STRESS_REPORT)
    if tags.get(T.VERSION.STRESS_TEST) != "pass" or not uri:
        return None
    try:
        report = ctx.storage.read_json(uri)
    except (StorageError, OSError, ValueError):
        return None
    meta = report.get("meta") if isinstance(report, dict) else None
    if not isinstance(meta, dict) or str(meta.get("policy_version")) != version or report.get("passed") is not True:
        return None
    return uri


def stress_version(ctx: StepContext, version: str) -> VersionStress:
    """Use the passing report of ``version``, else run the stress step on it (reward function: the
    one the version was trained with, when the pack has it). A dry run computes the verdict and
    writes nothing."""
    version = str(version)
    tags = ctx.tracker.model_version_tags(policy_model_name(ctx.scenario), version)
    found = passing_report(ctx, version, tags)
    if found is not None:
        return VersionStress(version, "pass", False, found, f"stress test of v{version} passed earlier ({found})")
    label = tags.get(T.VERSION.REWARD_FN)
    pack = ctx.load_pack()  # compiled once: what the reward function is looked up in is what is stressed
    request = StressRequest(reward_fn=label if label in pack.reward_fns else None, policy_version=version)
    out = run_stress(ctx, resolve_stress(ctx, request, pack))
    verdict = out.verdict
    why = "; ".join(out.reasons)[:1000]
    return VersionStress(
        version,
        verdict,
        True,
        out.report_uri,
        f"stress test of v{version} run for this promotion: {verdict}" + (f" ({why})" if why else ""),
    )

"""Gated evaluation of policy versions (promotion and rollback act on it: :mod:`rlops.pipeline_steps.promotion.flow`).

``rlops model evaluate --candidate V`` runs :func:`evaluate_candidate`: the candidate and the
``champion`` (the pack's rule engine while there is no champion — the production fallback)
play the same seeded held-out episodes in the sandbox (profile ``evaluate.profile``, default
:func:`evaluation_profile`: the calibrated sandbox once a calibration exists, else the pack's
production stand-in ``live``; seeds training never uses), and the gates of
:mod:`rlops.pipeline_steps.promotion.gates` judge the paired outcomes, the candidate's decision
latency and its segments (:mod:`rlops.pipeline_steps.promotion.evaluate_sandbox`), its stress-test
verdict, the off-policy estimate on logged traffic (:mod:`rlops.pipeline_steps.promotion.ope_gate`)
and, when the trace store holds live A/B traffic for it, the challenger group against the control
group (:mod:`rlops.pipeline_steps.promotion.evaluate_live`).
The gate table goes to MLflow (an ``evaluate-…`` run: ``gates.json`` table + ``gates.html``)
and to ``reports/evaluate/<scenario>/<run_key>/v<candidate>/``
(:mod:`rlops.pipeline_steps.promotion.evaluate_report`).

This module judges; it moves no alias.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.arguments import MAX_EPISODES, count
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.policy_loader import greedy_act, load_policy_ref, resolve
from rlops.pipeline_steps.infra.policy_metrics import policy_metrics, segment_returns
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.promotion.evaluate_live import live_ab_gates
from rlops.pipeline_steps.promotion.evaluate_report import EvaluationReport, record_evaluation, rounded
from rlops.pipeline_steps.promotion.evaluate_sandbox import named_segment_gates, segment_masks, timed_p99
from rlops.pipeline_steps.promotion.evidence import deciding, judge, trust_row
from rlops.pipeline_steps.promotion.gates import comparison_gates, stress_gate
from rlops.pipeline_steps.promotion.ope_gate import ope_gates, ope_run_fields
from rlops.pipeline_steps.promotion.request import EvaluateRequest
from rlops.pipeline_steps.training.log_split import HoldOut
from rlops.registry import tags as T
from rlops.registry.client import CHAMPION, TrackingError, policy_model_name
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.policies import evaluate_policy, rule_policy
from rlops.sandbox.profiles import CALIBRATED, default_profile

if TYPE_CHECKING:
    from rlops.common.params_operations import ExplorationParams, OpeParams
    from rlops.common.params_promotion import EvaluateParams
    from rlops.model.policy import PolicyNetwork
    from rlops.sandbox.pack import Pack

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers
def _version_tags(ctx: StepServices, version: str) -> dict[str, str]:
    """Tags of a policy version; a version that does not exist is bad input (ValueError)."""
    name = policy_model_name(ctx.scenario)
    try:
        return ctx.tracker.model_version_tags(name, version)
    except TrackingError as exc:
        code = str(getattr(exc.__cause__, "error_code", ""))
        if code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise ValueError(
                f"{name} has no version {version!r}; pass a registered version number "
                "(see the MLflow model registry or the output of `rlops train policy`)"
            ) from None
        raise


def _version_of(ctx: StepServices, policy: str) -> str:
    """The registry version ``policy`` names (``3``, ``<scenario>-policy/3``, ``challenger``…)."""
    ref = resolve(ctx, policy)
    if ref is None:
        raise UserError(f"policy {policy!r}: that alias is not set for {policy_model_name(ctx.scenario)}")
    return str(ref.version)


def _network(ctx: StepServices, version: str, dst: Path) -> PolicyNetwork:

    loaded = load_policy_ref(ctx, PolicyRef(ctx.scenario, version=version), dst)
    assert loaded is not None  # a version, not an alias
    return loaded.network


# --------------------------------------------------------------------------- evaluate
def evaluation_profile(pack: Any, configured: str | None) -> str:
    """The world the gates judge in: ``configured``, else the best model of production there is —
    the calibrated sandbox once live traffic has been observed (its population, API behaviour and
    fitted outcome factors), else the pack's production stand-in (``live``). The pack's own ``live``
    profile is its author's guess at the start: it never learns of a change, and a candidate
    trained on a changed world would be judged in the old one."""
    if configured or CALIBRATED not in pack.scenario.profiles:
        return default_profile(pack, "production", configured)
    return CALIBRATED


@dataclass(frozen=True)
class EvaluationSetup:
    """One evaluation's inputs, resolved: the candidate and the champion as the registry names them,
    the pack and the settings the gates judge with."""

    candidate: str
    """The registry version the request's ``candidate`` names."""
    tags: dict[str, str]
    """The candidate version's tags (its reward function, its stress verdict, a log hold-out)."""
    champion: str | None
    """The ``champion`` version (None: the rule engine serves)."""
    pack: Pack
    """The scenario pack, compiled once: the latest calibration applied, the signals in force bound."""
    profile: str
    """The simulation profile the sandbox gates play in (:func:`evaluation_profile`)."""
    reward_fn: str
    """The reward function's label: ``evaluate.reward_fn``, else the candidate's own, else the run's."""
    episodes: int
    """Held-out seeded episodes each side plays (the request's, else ``evaluate.episodes``)."""
    evaluate: EvaluateParams
    """The params' ``evaluate:`` block: the gate thresholds, the seed, the segments, the A/B window."""
    ope: OpeParams
    """The params' ``ope:`` block: the off-policy gate on logged live traffic."""
    exploration: ExplorationParams
    """The params' ``exploration:`` block: how the candidate will serve, as the off-policy gate judges it."""


def resolve_evaluation(ctx: StepContext, request: EvaluateRequest) -> EvaluationSetup:
    """The :class:`EvaluationSetup` of ``request`` in the run of ``ctx``; bad input (episodes out
    of bounds, an unknown version, the champion itself) is refused before the pack is compiled."""
    episodes = request.episodes
    if episodes is not None:  # before any registry or sandbox work
        count("--episodes", episodes, maximum=MAX_EPISODES)
    candidate = _version_of(ctx, request.candidate)
    settings = ctx.config.evaluate
    name = policy_model_name(ctx.scenario)
    candidate = str(candidate)
    tags = _version_tags(ctx, candidate)
    champion = ctx.tracker.get_alias(name, CHAMPION)
    if champion == candidate:
        raise ValueError(f"{name} v{candidate} is already the champion; evaluate a newer version")
    pack = ctx.load_pack()
    profile = evaluation_profile(pack, settings.profile)
    label = settings.reward_fn or (tags.get("reward_fn") if tags.get("reward_fn") in pack.reward_fns else None)
    label = str(label or ctx.reward_choice(None, pack).reward_fn)
    n = count("--episodes", episodes if episodes is not None else settings.episodes, maximum=MAX_EPISODES)
    return EvaluationSetup(
        candidate=candidate,
        tags=tags,
        champion=champion,
        pack=pack,
        profile=profile,
        reward_fn=label,
        episodes=n,
        evaluate=settings,
        ope=ctx.config.ope,
        exploration=ctx.config.exploration,
    )


def evaluate_candidate(
    ctx: StepContext, request: EvaluateRequest, stress_verdict: str | None = None
) -> EvaluationReport:
    """Compare the request's ``candidate`` with the champion (or the rule engine) and judge every
    gate. ``stress_verdict``: the verdict of a stress test run for this evaluation (a dry run
    writes no tag for the gate to read), else the version's ``stress_test`` tag."""
    return judge_candidate(ctx, resolve_evaluation(ctx, request), stress_verdict)


def judge_candidate(
    services: StepServices, setup: EvaluationSetup, stress_verdict: str | None = None
) -> EvaluationReport:
    """Play the candidate and its baseline in the sandbox, judge every gate and record the verdict
    (nothing is written on a dry run)."""
    settings = cfg = setup.evaluate  # the gate thresholds are part of the evaluate block
    candidate, champion, tags, pack = setup.candidate, setup.champion, setup.tags, setup.pack
    profile, label, n, seed = setup.profile, setup.reward_fn, setup.episodes, settings.seed
    notes: list[str] = []

    with tempfile.TemporaryDirectory(prefix="rlops-eval-") as tmp:
        cand_policy = _network(services, candidate, Path(tmp))
        baseline, champ_act, champ_net = "rules", rule_policy, None
        if champion is not None:
            champ_policy = _network(services, champion, Path(tmp))
            if champ_policy.config.obs_dim == cand_policy.config.obs_dim:
                baseline, champ_act = f"champion v{champion}", greedy_act(champ_policy)
                champ_net = champ_policy
            else:
                notes.append(f"champion v{champion} uses another observation layout: compared with the rule engine")

        def run(act: Any, world: str = profile) -> Any:
            env = BatchedEnv(pack.scenario, pack.reward_fn(label), num_envs=n, profile=world, illegal_action="noop")
            return evaluate_policy(pack, act, seed=seed, env=env), env

        cand_act = greedy_act(cand_policy)
        cand_res, env = run(cand_act)
        champ_res, _ = run(champ_act)
        env.reset(seed)  # the initial states both policies started from
        segments = segment_masks(pack, env.S, cand_res.segments, cand_res.segment_names, settings.segments)
        p99 = timed_p99(cand_policy, champ_net, env.observe(), settings.latency_samples, cfg.latency_p99_ratio)
        named = named_segment_gates(pack, profile, run, cand_act, champ_act, cfg, judged=segments)

    gates = comparison_gates(cand_res, champ_res, cfg, segments, p99, seed=seed) + named
    gates.append(stress_gate({**tags, T.VERSION.STRESS_TEST: stress_verdict} if stress_verdict else tags, cfg))
    ab, ab_note = live_ab_gates(services, pack, candidate, cfg, int(settings.ab_window_hours))
    gates.extend(ab)
    notes.append(f"live A/B: {ab_note}")

    holdout = HoldOut.from_tags(tags)  # a candidate learnt from logs: judged on the episodes it did not see
    off_policy = ope_gates(
        services, setup.ope, setup.exploration, pack, cand_policy, cand_res.mean_return, label, profile, holdout
    )
    ope_params, ope_tags = ope_run_fields(off_policy.gates, setup.ope)
    gates.extend(off_policy.gates)
    notes.append(off_policy.note)
    if off_policy.result is not None:
        incumbent = "rule engine" if champ_net is None else f"champion v{champion}"
        res = off_policy.result
        gates.append(
            trust_row(
                champ_res.mean_return,
                res.logged_return,
                res.logged_return_se,
                res.logged_return_sd,
                incumbent,
                setup.ope,
            )
        )
    ope_metrics = dict(off_policy.metrics)
    if off_policy.result is not None and math.isfinite(off_policy.result.logged_return):
        # the sandbox's trust in MLflow: the incumbent's sandbox value over its logged one
        logged = off_policy.result.logged_return
        ope_metrics["ope_incumbent_sandbox_value"] = float(champ_res.mean_return)
        if logged != 0:
            ope_metrics["ope_sim_to_real_ratio"] = float(champ_res.mean_return) / logged
    evidence = judge(gates, setup.ope.required)
    if not evidence.sandbox_trusted:
        notes.append("the sandbox is untrusted: its gates are shown but do not decide (sandbox:trust)")
    if evidence.hold:
        notes.append(f"at most the canary stage: {evidence.hold}")
    failed = [g.gate for g in deciding(gates) if not g.passed]
    report = EvaluationReport(
        scenario=services.scenario,
        run_key=services.run_key,
        candidate=candidate,
        champion_version=champion,
        baseline=baseline,
        passed=not failed,
        failed_gates=failed,
        episodes=n,
        seed=seed,
        profile=profile,
        reward_fn=label,
        notes=notes,
        candidate_summary=rounded(cand_res.summary()),
        champion_summary=rounded(champ_res.summary()),
        gates=[g.to_dict() for g in gates],
        dry_run=services.dry_run,
        candidate_metrics=policy_metrics(
            cand_res.summary(), segment_returns(cand_res.returns.cpu().numpy(), segments), p99[0]
        ),
        ope_metrics=ope_metrics,
        ope_params=ope_params,
        ope_tags=ope_tags,
        evidence=evidence.as_dict(),
        hold=evidence.hold,
    )
    if not services.dry_run:
        uri, run_id = record_evaluation(services, report.as_dict(), gates)
        report = dataclasses.replace(report, report_uri=uri, eval_run_id=run_id)
    return report

"""Gated evaluation of policy versions (promotion and rollback act on it: :mod:`rlops.pipeline_steps.promotion.flow`).

``rlops model evaluate --candidate V`` runs :func:`evaluate_candidate`: the candidate and the
``champion`` (the pack's rule engine while there is no champion — the production fallback)
play the same seeded held-out episodes in the sandbox (profile ``evaluate.profile``, default
:func:`evaluation_profile`: the calibrated sandbox once a calibration exists, else the pack's
production stand-in ``live``; seeds training never uses), and the gates of
:mod:`rlops.pipeline_steps.promotion.gates` judge the paired outcomes, the candidate's decision
latency, its segments, its stress-test verdict and, when the trace store holds live A/B traffic
for it, the challenger group against the control group.
The gate table goes to MLflow (an ``evaluate-…`` run: ``gates.json`` table + ``gates.html``)
and to ``reports/evaluate/<scenario>/<run_key>/v<candidate>/``.

This module judges; it moves no alias.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.common.arguments import MAX_EPISODES, count
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef, canonical_policy
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.datasets import EVALUATION, calibration_dataset
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.policy_loader import greedy_act, load_policy_ref, resolve
from rlops.pipeline_steps.infra.policy_metrics import policy_metrics, segment_returns
from rlops.pipeline_steps.promotion.evidence import deciding, judge, trust_row
from rlops.pipeline_steps.promotion.gates import (
    Gate,
    GateConfig,
    ab_gates,
    comparison_gates,
    episode_outcomes,
    gate_frame,
    gate_table_html,
    segment_gates,
    stress_gate,
    with_gate_summary,
)
from rlops.pipeline_steps.promotion.ope_gate import ope_gates, ope_run_fields
from rlops.pipeline_steps.promotion.request import EvaluateRequest
from rlops.pipeline_steps.promotion.stages import segment_episodes
from rlops.pipeline_steps.training.log_split import HoldOut
from rlops.registry import tags as T
from rlops.registry.client import CHAMPION, TrackingError, policy_model_name
from rlops.registry.datasets import log_dataset_inputs
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.errors import ExprError
from rlops.sandbox.expr import BOOL, compile_expr
from rlops.sandbox.policies import evaluate_policy, rule_policy
from rlops.sandbox.profiles import CALIBRATED, default_profile

if TYPE_CHECKING:
    import torch

    from rlops.model.policy import PolicyNetwork
    from rlops.sandbox.pack import Pack

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers
def _version_tags(ctx: StepContext, version: str) -> dict[str, str]:
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


def _version_of(ctx: StepContext, policy: str) -> str:
    """The registry version ``policy`` names (``3``, ``<scenario>-policy/3``, ``challenger``…)."""
    ref = resolve(ctx, policy)
    if ref is None:
        raise UserError(f"policy {policy!r}: that alias is not set for {policy_model_name(ctx.scenario)}")
    return str(ref.version)


def _network(ctx: StepContext, version: str, dst: Path) -> PolicyNetwork:

    loaded = load_policy_ref(ctx, PolicyRef(ctx.scenario, version=version), dst)
    assert loaded is not None  # a version, not an alias
    return loaded.network


def paired_p99_ms(
    policy: PolicyNetwork, obs: torch.Tensor, samples: int = 300, other: PolicyNetwork | None = None
) -> tuple[float, float | None]:
    """p99 of the wall time of one ``act`` call on a single observation (batch 1), in ms, of
    ``policy`` and of ``other``: the two are timed alternately on the same rows in this process,
    so load on the machine slows both alike and their ratio is what a gate can judge."""
    n = obs.shape[0]
    nets = [policy] + ([other] if other is not None else [])
    for net in nets:
        for i in range(min(10, n)):  # warm-up: first calls pay for allocator and dispatch caches
            net.act(obs[i : i + 1], deterministic=True)
    times = np.empty((len(nets), samples))
    for i in range(samples):
        row = obs[i % n : i % n + 1]
        order = (0,) if len(nets) == 1 else ((0, 1) if i % 2 == 0 else (1, 0))  # neither always goes first
        for j in order:
            t0 = time.perf_counter()
            nets[j].act(row, deterministic=True)
            times[j, i] = (time.perf_counter() - t0) * 1000.0
    p99 = np.percentile(times, 99, axis=1)
    return float(p99[0]), (float(p99[1]) if other is not None else None)


def timed_p99(
    cand: PolicyNetwork, champ: PolicyNetwork | None, obs: torch.Tensor, samples: int, bound: float, tries: int = 3
) -> tuple[float, float | None]:
    """:func:`paired_p99_ms` of both, measured again (up to ``tries`` times) while the ratio is
    over ``bound``, keeping the lowest ratio: a load spike slows one run, a slower network stays
    slower on every run."""
    best = paired_p99_ms(cand, obs, samples, champ)
    for _ in range(tries - 1):
        if best[1] is None or best[0] <= bound * best[1]:
            break
        again = paired_p99_ms(cand, obs, samples, champ)
        best = min(best, again, key=lambda t: t[0] / t[1])  # type: ignore[operator]  # both pairs hold floats
    return best


def segment_masks(
    pack: Pack, S0: torch.Tensor, segment_codes: torch.Tensor, names: list[str], expressions: dict[str, str]
) -> dict[str, np.ndarray]:
    """Population segments of the profile plus expression segments over the initial states."""
    out: dict[str, np.ndarray] = {}
    if len(names) > 1:
        codes = segment_codes.numpy()
        out.update({n: codes == i for i, n in enumerate(names)})
    for name, source in (expressions or {}).items():
        try:
            expr = compile_expr(source, pack.scenario.resolve, want=BOOL)
        except ExprError as exc:
            raise ValueError(
                f"evaluate.segments.{name}: {exc} (the expression is evaluated on the initial "
                f"state of scenario {pack.name})"
            ) from None
        out[name] = expr(S0).cpu().numpy().astype(bool)
    return out


def live_ab_gates(
    ctx: StepContext,
    pack: Pack,
    candidate: str,
    cfg: GateConfig,
    window_hours: float,
    segment: str | None = None,
    control_before: datetime | None = None,
) -> tuple[list[Gate], str]:
    """A/B gates from captured traces of the last ``window_hours`` before the run key: episodes
    of group ``challenger`` served by the candidate against groups ``champion``/``control``; with a
    ``segment`` (a roll-out stage's), the episodes of that segment only, on both sides. With
    ``control_before`` (a stage that serves its whole segment, so no request of it is the
    champion's meanwhile) the control episodes are those of the same length of time before it.
    Trace rows name their policy in any form :class:`~rlops.common.policy_ref.PolicyRef` reads
    (``7``, ``credit_approval-policy/7``…); they are compared by canonical text, never raw."""
    traces = ctx.traces.read(ctx.scenario, ctx.key.lookback(window_hours))
    if control_before is not None:
        before = ctx.traces.read(ctx.scenario, (control_before - timedelta(hours=window_hours), control_before))
        if not before.empty and "test_group" in before:  # only its control rows: the challenger's are this stage's
            before = before[before["test_group"].fillna("").astype(str).isin(["champion", "control"])]
            if "test_group" in traces:
                traces = traces[traces["test_group"].fillna("").astype(str).eq("challenger")]
            traces = pd.concat([traces, before], ignore_index=True)
    if traces.empty:
        return [], "no captured traces in the window"
    if "source" in traces:  # sandbox rollouts in the store are not live traffic
        traces = traces[traces["source"].fillna("live").astype(str).eq("live")]
    if "test_group" not in traces:
        return [], "captured traces carry no test_group"
    group = traces["test_group"].fillna("").astype(str)
    if "policy_version" in traces:
        wanted = canonical_policy(candidate, ctx.scenario)
        served_by = traces["policy_version"].map(lambda v: _canonical_or_none(v, ctx.scenario))
        by_candidate = served_by.eq(wanted)
    else:
        by_candidate = pd.Series(True, index=traces.index)
    served = traces.loc[group.eq("challenger") & by_candidate, "episode_id"].unique()
    ch_rows = traces[group.eq("challenger") & traces["episode_id"].isin(served)]
    ctl_rows = traces[group.isin(["champion", "control"])]
    where = ""
    if segment is not None:
        inside = segment_episodes(pack, pd.concat([ch_rows, ctl_rows]), segment)
        ch_rows = ch_rows[ch_rows["episode_id"].astype(str).isin(inside)]
        ctl_rows = ctl_rows[ctl_rows["episode_id"].astype(str).isin(inside)]
        where = f" in segment {segment}"
    if ch_rows.empty or ctl_rows.empty:
        return [], f"no live A/B traffic for this candidate{where}"
    takeover = {a.name for a in pack.scenario.spec.actions if a.human_takeover}
    return ab_gates(episode_outcomes(ch_rows, takeover), episode_outcomes(ctl_rows, takeover), cfg), (
        f"{ch_rows['episode_id'].nunique()} challenger / {ctl_rows['episode_id'].nunique()} control episodes{where}"
    )


@functools.lru_cache(maxsize=4096)
def _canonical_or_none(text: Any, scenario: str) -> str | None:
    """The canonical policy a trace row names; None for a missing or unreadable value (or
    another scenario's policy), which then matches no candidate."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return None
    try:
        return canonical_policy(str(text), scenario)
    except UserError:
        return None


# --------------------------------------------------------------------------- evaluate
def named_segment_gates(
    pack: Any, profile: str, run: Any, cand_act: Any, champ_act: Any, cfg: Any, judged: Collection[str] = ()
) -> list[Any]:
    """The segment gates of the populations the pack's author named in its production stand-in
    (``live``: the complaint pack's angry customers), when the gates judge in another profile. A
    calibrated sandbox's population is fitted (``fitted1`` …) and carries none of those names, and a
    segment is only defined by the population that draws it: both policies play seeded episodes
    drawn as the stand-in draws them, in the world of ``profile`` — its API error rates and
    latencies, its fitted outcomes — and each named segment is judged there. The stand-in's own
    latencies and error rates are its author's guess at the start: after an API slowed down, a
    candidate that calls it less would be judged on calls that are no longer that cheap. A name
    already in ``judged`` (the evaluation profile's own segments: a calibrated population has its
    ``base`` too) keeps that gate only, so the gate table has one row per segment."""
    import torch

    stand_in = default_profile(pack, "production")
    if stand_in == profile:
        return []
    world = pack.scenario.profile_with_population(profile, stand_in)
    cand, _ = run(cand_act, world)
    champ, _ = run(champ_act, world)
    masks = segment_masks(pack, torch.empty(0), cand.segments, cand.segment_names, {})
    masks = {n: m for n, m in masks.items() if n not in set(judged)}
    if not masks:
        return []
    rc, rb = cand.returns.double().numpy(), champ.returns.double().numpy()
    return segment_gates(rc, rb, masks, cfg)


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


def evaluate_candidate(
    ctx: StepContext, request: EvaluateRequest, stress_verdict: str | None = None
) -> EvaluationReport:
    """Compare the request's ``candidate`` with the champion (or the rule engine) and judge every
    gate. ``stress_verdict``: the verdict of a stress test run for this evaluation (a dry run
    writes no tag for the gate to read), else the version's ``stress_test`` tag."""
    episodes = request.episodes
    if episodes is not None:  # before any registry or sandbox work
        count("--episodes", episodes, maximum=MAX_EPISODES)
    candidate = _version_of(ctx, request.candidate)
    settings = cfg = ctx.config.evaluate  # the gate thresholds are part of the evaluate block
    name = policy_model_name(ctx.scenario)
    candidate = str(candidate)
    tags = _version_tags(ctx, candidate)
    champion = ctx.tracker.get_alias(name, CHAMPION)
    if champion == candidate:
        raise ValueError(f"{name} v{candidate} is already the champion; evaluate a newer version")
    pack = ctx.load_pack()
    profile = evaluation_profile(pack, settings.profile)
    label = settings.reward_fn or (tags.get("reward_fn") if tags.get("reward_fn") in pack.reward_fns else None)
    label = str(label or ctx.reward_choice().reward_fn)
    n = count("--episodes", episodes if episodes is not None else settings.episodes, maximum=MAX_EPISODES)
    seed = settings.seed
    notes: list[str] = []

    with tempfile.TemporaryDirectory(prefix="rlops-eval-") as tmp:
        cand_policy = _network(ctx, candidate, Path(tmp))
        baseline, champ_act, champ_net = "rules", rule_policy, None
        if champion is not None:
            champ_policy = _network(ctx, champion, Path(tmp))
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
    ab, ab_note = live_ab_gates(ctx, pack, candidate, cfg, int(settings.ab_window_hours))
    gates.extend(ab)
    notes.append(f"live A/B: {ab_note}")

    holdout = HoldOut.from_tags(tags)  # a candidate learnt from logs: judged on the episodes it did not see
    off_policy = ope_gates(ctx, pack, cand_policy, cand_res.mean_return, label, profile, holdout)
    ope_params, ope_tags = ope_run_fields(off_policy.gates, ctx.config.ope)
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
                ctx.config.ope,
            )
        )
    ope_metrics = dict(off_policy.metrics)
    if off_policy.result is not None and math.isfinite(off_policy.result.logged_return):
        # the sandbox's trust in MLflow: the incumbent's sandbox value over its logged one
        logged = off_policy.result.logged_return
        ope_metrics["ope_incumbent_sandbox_value"] = float(champ_res.mean_return)
        if logged != 0:
            ope_metrics["ope_sim_to_real_ratio"] = float(champ_res.mean_return) / logged
    evidence = judge(gates, ctx.config.ope.required)
    if not evidence.sandbox_trusted:
        notes.append("the sandbox is untrusted: its gates are shown but do not decide (sandbox:trust)")
    if evidence.hold:
        notes.append(f"at most the canary stage: {evidence.hold}")
    failed = [g.gate for g in deciding(gates) if not g.passed]
    report = EvaluationReport(
        scenario=ctx.scenario,
        run_key=ctx.run_key,
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
        candidate_summary=_round(cand_res.summary()),
        champion_summary=_round(champ_res.summary()),
        gates=[g.to_dict() for g in gates],
        dry_run=ctx.dry_run,
        candidate_metrics=policy_metrics(
            cand_res.summary(), segment_returns(cand_res.returns.cpu().numpy(), segments), p99[0]
        ),
        ope_metrics=ope_metrics,
        ope_params=ope_params,
        ope_tags=ope_tags,
        evidence=evidence.as_dict(),
        hold=evidence.hold,
    )
    if not ctx.dry_run:
        uri, run_id = _record(ctx, report.as_dict(), gates)
        report = dataclasses.replace(report, report_uri=uri, eval_run_id=run_id)
    return report


def _round(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}


def _record(ctx: StepContext, report: dict[str, Any], gates: list[Gate]) -> tuple[str, str]:
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

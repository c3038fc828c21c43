"""``rlops stress``: does a reward function hold up at the edges, and does a policy hold up
when the simulation gets worse?

Reward function (always): ≥1000 edge states per action, every action stepped on each of them in
the nominal and a harsh simulation; fails on NaN, ±inf, ``|r|`` over the clip bound (``CLIP`` of
the module, else ``stress.reward_bound``), a breakdown that does not sum to the total, a component
that raises, and a gaming probe that out-earns the honest baseline (see
:mod:`rlops.pipeline_steps.stress.checks` and :mod:`rlops.pipeline_steps.stress.probes`).

Policy (with ``--policy-version``): the greedy policy on ``stress.policy_episodes`` seeded
episodes in the nominal profile (``calibrated``, else ``live``, else the pack's default, unless
``stress.policy_profile`` names one) and under each of ``stress.perturbations`` (latency ×k,
error rates ×k, every episode in one population segment). A perturbation fails when the mean
return falls below ``nominal − return_floor·|nominal|`` or the completion rate below
``completion_floor × nominal``, and below what the rule engine and the champion reach under the
same perturbation (:func:`stress_policy`).

Writes ``report.json`` and ``report.html`` to ``reports/stress/<scenario>/<run_key>/`` — under
``v<V>/`` there with a policy version, so versions stressed under one run key keep a report each —,
logs both to MLflow, and with a policy version tags ``<scenario>-policy`` v<V> with
``stress_test=pass|fail`` and ``stress_report=<uri>`` (the evaluation gate reads that tag). Exit
code 1 when anything fails.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.params_promotion import StressConfig  # the typed ``stress:`` params block
from rlops.common.progress import progress_bar
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.html import html_page, html_table
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.policy_loader import greedy_act, load_policy_ref, resolve
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.registry import tags as T
from rlops.registry.client import CHAMPION, policy_model_name, reward_fn_model_name
from rlops.sandbox.profiles import default_profile

if TYPE_CHECKING:  # the computations (torch, the sandbox) are imported where they run
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.policy_loader import LoadedPolicy
    from rlops.pipeline_steps.stress.checks import RewardStress
    from rlops.pipeline_steps.stress.governance import ConstraintResult
    from rlops.pipeline_steps.stress.probes import ProbeResult
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.policies import ActFn
    from rlops.sandbox.reward import RewardFunction


@dataclass(frozen=True)
class PolicyStressRow:
    scenario: str
    profile: str
    mean_return: float
    completion_rate: float
    human_takeover_rate: float
    mean_handling_ms: float
    return_floor: float | None = None
    completion_floor: float | None = None
    passed: bool = True
    reason: str = ""


# --------------------------------------------------------------------------- computations
def stress_reward_fn(pack: Pack, fn: RewardFunction, cfg: StressConfig, probes: bool = True) -> RewardStress:
    """The reward-function half: edge checks in two simulations, then the gaming probes."""
    from rlops.pipeline_steps.stress.checks import (
        HARSH,
        STRESS_PROFILE,
        RewardStress,
        check_reward,
        edge_states,
        perturbed_pack,
        visibility_coverage,
    )
    from rlops.pipeline_steps.stress.probes import run_gaming_probes

    S, counts = edge_states(pack, fn, cfg.edge_states, cfg.seed)
    harsh = perturbed_pack(pack, action_error_rate=HARSH["error_rate"], jitter_ms=HARSH["jitter_ms"])
    bound = fn.clip if fn.clip is not None else cfg.reward_bound
    coverage, findings, dead = check_reward(
        pack, fn, S, bound, cfg.sum_tolerance, sims=[("nominal", pack, None), ("harsh", harsh, STRESS_PROFILE)]
    )
    constraints: list[ConstraintResult] = []
    if not any(f.check == "raised" for f in findings):
        from rlops.pipeline_steps.stress.governance import check_constraints

        constraints, broken = check_constraints(pack, fn, S)
        findings = findings + broken
    results: list[ProbeResult] = []
    base: dict[str, float] = {}
    if probes and not any(f.check == "raised" for f in findings):
        results, base = run_gaming_probes(
            pack, fn, cfg.gaming_episodes, cfg.gaming_seed, cfg.gaming_margin, cfg.baselines
        )
    signal_range: list[dict[str, Any]] = []
    if fn.signal_weights and not any(f.check == "raised" for f in findings):
        from rlops.pipeline_steps.stress.signal_range import stress_signal_range

        more, more_probes, signal_range = stress_signal_range(pack, fn, S, bound, cfg, probes)
        findings, results = findings + more, results + more_probes
    return RewardStress(
        fn.label,
        fn.version,
        bound,
        coverage,
        findings,
        results,
        base,
        counts,
        visibility_coverage(pack, S),
        dead,
        constraints,
        signal_range,
    )


def nominal_profile(pack: Pack, configured: str | None = None) -> str:

    return default_profile(pack, "sandbox", configured)


def stress_policy(
    pack: Pack, fn: RewardFunction, act: ActFn, cfg: StressConfig, champion: ActFn | None = None
) -> list[PolicyStressRow]:
    """Nominal run, then one run per perturbation on the same seeded episodes.

    A perturbation can make every policy earn less (three times the latency costs handling time
    whatever the decisions), so each floor is the lowest of its bars: for the return, the
    policy's nominal return minus ``return_floor`` of it, what the production fallback (the pack's
    rule engine) earns under the same perturbation and, given the ``champion``, what the policy in
    production earns there; for the completion rate, ``completion_floor`` × the lowest of the
    nominal rate and the fallback's and the champion's rates under the perturbation (the same
    allowance for the sampling noise of ``policy_episodes`` episodes against each). A policy fails when it degrades
    more than allowed *and* falls below the fallback and the champion: a perturbation nobody
    survives — five times an API error rate of 0.26 is an API that always fails — tells a
    candidate from the champion only by how it fails.
    """
    from rlops.pipeline_steps.stress.checks import STRESS_PROFILE, perturbed_pack
    from rlops.sandbox.env import BatchedEnv
    from rlops.sandbox.policies import evaluate_policy, rule_policy

    base = nominal_profile(pack, cfg.policy_profile)

    def run_with(p: Pack, profile: str, policy: ActFn) -> dict[str, float]:
        env = BatchedEnv(p.scenario, fn, num_envs=cfg.policy_episodes, profile=profile, illegal_action="noop")
        return evaluate_policy(p, policy, cfg.policy_episodes, seed=cfg.gaming_seed, env=env).summary()

    def run(p: Pack, profile: str) -> dict[str, float]:
        return run_with(p, profile, act)

    nom = run(pack, base)
    rows = [
        PolicyStressRow(
            "nominal",
            base,
            nom["mean_return"],
            nom["completion_rate"],
            nom["human_takeover_rate"],
            nom["mean_handling_ms"],
        )
    ]
    for name, spec in cfg.perturbations.items():
        r_floor = cfg.return_floor if spec.return_floor is None else spec.return_floor
        c_floor = cfg.completion_floor if spec.completion_floor is None else spec.completion_floor
        p = perturbed_pack(pack, base, latency=spec.latency, errors=spec.errors, segment=spec.segment)
        s = run(p, STRESS_PROFILE)
        others = [run_with(p, STRESS_PROFILE, rule_policy)]
        if champion is not None:
            others.append(run_with(p, STRESS_PROFILE, champion))
        min_ret = min(nom["mean_return"] - r_floor * abs(nom["mean_return"]), *(o["mean_return"] for o in others))
        min_comp = c_floor * min(nom["completion_rate"], *(o["completion_rate"] for o in others))
        why = []
        if s["mean_return"] < min_ret:
            why.append(f"mean return {s['mean_return']:.4g} < floor {min_ret:.4g}")
        if s["completion_rate"] < min_comp:
            why.append(f"completion {s['completion_rate']:.3f} < floor {min_comp:.3f}")
        rows.append(
            PolicyStressRow(
                name,
                base,
                s["mean_return"],
                s["completion_rate"],
                s["human_takeover_rate"],
                s["mean_handling_ms"],
                min_ret,
                min_comp,
                not why,
                "; ".join(why),
            )
        )
    return rows


# --------------------------------------------------------------------------- report
def report_dict(reward: RewardStress, policy: list[PolicyStressRow] | None, meta: dict[str, Any]) -> dict[str, Any]:
    passed = reward.passed and all(r.passed for r in policy or [])
    reasons = [f.message for f in reward.findings]
    reasons += [
        f"gaming probe '{p.name}' out-earns the honest baseline '{p.baseline}' by {p.advantage:.4g} "
        f"(95% interval {p.advantage_low:.4g} … {p.advantage_high:.4g})"
        for p in reward.probes
        if not p.passed
    ]
    reasons += [f"policy under '{r.scenario}': {r.reason}" for r in policy or [] if not r.passed]
    rules_at = {f" at {r['at']}": r["baselines"].get("rules", float("nan")) for r in reward.signal_range}

    def rules_return(p: ProbeResult) -> float:  # a probe at a signal's end is paired with the rules there
        at = next((k for k in rules_at if p.name.endswith(k)), None)
        return rules_at[at] if at is not None else reward.baselines.get("rules", float("nan"))

    warnings = [
        f"gaming probe '{p.name}' earns more than the rule engine ({p.mean_return:.4g} vs "
        f"{rules_return(p):.4g}) though less than '{p.baseline}': either the rule "
        "engine is weak in those states or the reward overpays that behaviour — worth a look"
        for p in reward.probes
        if p.passed and p.beats_rules
    ]
    return {
        "passed": passed,
        "verdict": "pass" if passed else "fail",
        "reasons": reasons,
        "warnings": warnings,
        "meta": meta,
        "reward": reward.to_dict(),
        "policy": [asdict(r) for r in policy] if policy is not None else None,
    }


def render_html(report: dict[str, Any]) -> str:
    rw, meta = report["reward"], report["meta"]
    verdict = "PASS" if report["passed"] else "FAIL"
    parts = [
        f"<p class='verdict'>{verdict}</p><p>Scenario <b>{meta.get('scenario')}</b>, reward function "
        f"<b>{rw['reward_fn']}</b> (sha256 {rw['reward_fn_sha256'][:12]}…), bound ±{rw['bound']:g}"
        + (f", policy version <b>{meta['policy_version']}</b>" if meta.get("policy_version") else "")
        + ".</p>"
    ]
    if report["reasons"]:
        parts.append("<h2>Why it failed</h2><ul>" + "".join(f"<li>{_esc(r)}</li>" for r in report["reasons"]) + "</ul>")
    if report.get("warnings"):
        parts.append("<h2>Worth a look</h2><ul>" + "".join(f"<li>{_esc(w)}</li>" for w in report["warnings"]) + "</ul>")
    cols = [
        "action",
        "states",
        "legal",
        "masked",
        "non_finite",
        "out_of_bounds",
        "sum_mismatch",
        "raised",
        "clipped",
        "max_abs_reward",
    ]
    bad = {
        i: "fail"
        for i, c in enumerate(rw["coverage"])
        if c["non_finite"] or c["out_of_bounds"] or c["sum_mismatch"] or c["raised"]
    }
    parts.append(
        "<h2>Edge states per action</h2><p>Nominal and harsh simulation together; masked actions are "
        "executed as no-ops.</p>" + html_table(rw["coverage"], cols, bad)
    )
    if rw["findings"]:
        rows = [{**f, "example": json.dumps(f["example"])[:400] if f.get("example") else None} for f in rw["findings"]]
        parts.append(
            "<h2>Findings</h2>"
            + html_table(
                rows,
                ["check", "action", "sim", "component", "count", "message", "example"],
                {i: "fail" for i in range(len(rows))},
            )
        )
    if rw["probes"]:
        parts.append(
            "<h2>Gaming probes</h2><p>Honest baselines: "
            + ", ".join(f"{k} {v:.4g}" for k, v in rw["baselines"].items())
            + "</p>"
            + html_table(
                rw["probes"],
                [
                    "name",
                    "mean_return",
                    "baseline",
                    "baseline_return",
                    "advantage",
                    "advantage_low",
                    "advantage_high",
                    "beats_rules",
                    "passed",
                ],
                {
                    i: ("fail" if not p["passed"] else "warn" if p["beats_rules"] else "pass")
                    for i, p in enumerate(rw["probes"])
                },
            )
        )
    if report.get("policy"):
        parts.append(
            "<h2>Policy under perturbed simulation</h2>"
            + html_table(
                report["policy"],
                [
                    "scenario",
                    "profile",
                    "mean_return",
                    "return_floor",
                    "completion_rate",
                    "completion_floor",
                    "human_takeover_rate",
                    "mean_handling_ms",
                    "passed",
                    "reason",
                ],
                {i: "pass" if r["passed"] else "fail" for i, r in enumerate(report["policy"])},
            )
        )
    if rw.get("constraints"):
        parts.append(
            "<h2>Rule constraints</h2><p>Transitions of the edge states that break a rule's constraint, "
            "and how many of them the components citing the rule pay for.</p>"
            + html_table(
                rw["constraints"],
                ["rule", "constraint", "components", "judged", "violations", "rewarded", "passed"],
                {i: "pass" if c["passed"] else "fail" for i, c in enumerate(rw["constraints"])},
            )
        )
    if rw.get("signal_range"):
        parts.append(
            "<h2>Business signals over their declared range</h2><p>The checks and gaming probes above, "
            "run again with the signal-driven weights at each end of their range.</p>"
            + html_table(
                [
                    {**r, "signals": json.dumps(r["signals"]), "weights": json.dumps(r["weights"])}
                    for r in rw["signal_range"]
                ],
                ["signals", "weights", "findings", "probes_failed"],
                {
                    i: "fail" if r["findings"] or r["probes_failed"] else "pass"
                    for i, r in enumerate(rw["signal_range"])
                },
            )
        )
    vis = [{"field": k, **v} for k, v in rw["visibility"].items()]
    if vis:
        parts.append("<h2>Visibility coverage</h2>" + html_table(vis, ["field", "visible", "hidden"]))
    return html_page(f"Stress test — {meta.get('scenario')}", "".join(parts))


def _esc(text: str) -> str:
    import html

    return html.escape(text)


# --------------------------------------------------------------------------- step
def resolve_reward_fn(pack: Pack, reward_fn: str | None) -> RewardFunction:
    """A reward function by file path, or by label (``v1``) of the pack."""
    from rlops.sandbox.reward import load_reward_fn

    if reward_fn and Path(reward_fn).is_file():
        return load_reward_fn(Path(reward_fn), pack.rules, pack.scenario.action_names, roles=pack.scenario.role_names)
    try:
        return pack.reward_fn(Path(reward_fn).stem.removeprefix("reward_") if reward_fn else None)
    except KeyError as exc:
        raise ValueError(f"--reward-fn {reward_fn!r}: no such file, and {exc.args[0]}") from None


def champion_reference(ctx: StepContext, candidate: LoadedPolicy) -> LoadedPolicy | None:
    """The champion the candidate's perturbed runs are compared with: None when there is none, when
    the candidate is the champion, or when the champion reads another observation layout (a pack
    whose state changed since): it could not act on the candidate's observations."""
    ref = resolve(ctx, CHAMPION)
    if ref is None or str(ref.version) == candidate.version:
        return None
    champion = load_policy_ref(ctx, ref)
    if champion is None or champion.network.config.obs_dim != candidate.network.config.obs_dim:
        return None
    return champion


@dataclass(frozen=True)
class StressSummary(StepResult):
    """What a stress test concluded and where its report is."""

    passed: bool
    verdict: str
    """``pass`` or ``fail``."""
    reasons: list[str]
    """Why it failed: each finding, probe and perturbation that did not pass."""
    warnings: list[str]
    """Passing probes worth a look (they earn more than the rule engine)."""
    report_uri: str
    """The JSON report (a dry run names where it would be written)."""
    html_uri: str
    policy_version: str | None
    """The policy version stressed (None: the reward function alone)."""
    reward_fn: str
    reward_fn_sha256: str
    dry_run: bool
    run_id: str | None
    """The MLflow run holding the report (None: a dry run)."""


def stress_test(ctx: StepContext, request: StressRequest | None = None, progress: bool = False) -> StressSummary:
    """Run the stress test of the request's reward function and, with its ``policy_version``, of
    that policy under the perturbations; write its report (JSON and HTML) unless the run is dry.
    ``progress`` draws a bar over its stages (reward checks, then the policy runs) on stderr."""
    request = request or StressRequest()
    policy_version = request.policy_version
    cfg = ctx.config.stress
    pack = ctx.load_pack()
    fn = resolve_reward_fn(pack, request.reward_fn or ctx.reward_choice().reward_fn)
    loaded = load_policy_ref(ctx, policy_version) if policy_version is not None else None
    if policy_version is not None and loaded is None:
        raise UserError(f"policy {policy_version!r}: that alias is not set for {ctx.scenario}")
    with progress_bar(progress, total=1 + (loaded is not None), desc="stress", unit="stage") as bar:
        bar.set_postfix_str("reward checks and gaming probes")
        reward = stress_reward_fn(pack, fn, cfg)
        bar.update()
        policy_rows = None
        if loaded is not None:
            policy_version = loaded.version  # the registry version, whatever spelling named it
            bar.set_postfix_str(f"policy v{policy_version} under {len(cfg.perturbations)} perturbations")
            champion = champion_reference(ctx, loaded)
            policy_rows = stress_policy(
                pack, fn, greedy_act(loaded.network), cfg, greedy_act(champion.network) if champion else None
            )
            bar.update()
    meta = {
        "scenario": ctx.scenario,
        "run_key": ctx.run_key,
        "reward_fn_file": fn.path,
        "policy_version": policy_version,
        "config": cfg.model_dump(mode="json"),
    }
    report = report_dict(reward, policy_rows, meta)
    folder = (f"v{policy_version}",) if policy_version is not None else ()
    json_uri, html_uri = (ctx.report_uri("stress", *folder, f) for f in ("report.json", "report.html"))
    run_id = None
    if not ctx.dry_run:
        page = render_html(report)
        ctx.storage.write_json(json_uri, report)
        ctx.storage.write_text(html_uri, page)
        run_id = _track(ctx, report, page, fn, policy_version, json_uri)
    return StressSummary(
        passed=report["passed"],
        verdict=report["verdict"],
        reasons=report["reasons"],
        warnings=report["warnings"],
        report_uri=json_uri,
        html_uri=html_uri,
        policy_version=policy_version,
        reward_fn=fn.label,
        reward_fn_sha256=fn.version,
        dry_run=ctx.dry_run,
        run_id=run_id,
    )


def _track(
    ctx: StepContext, report: dict[str, Any], page: str, fn: RewardFunction, policy_version: str | None, json_uri: str
) -> str:

    tracker = ctx.tracker
    verdict = report["verdict"]

    with step_run(
        ctx,
        T.STRESS_TEST,
        label=f"v{policy_version}" if policy_version else None,
        extra_tags={T.STRESS_VERDICT: verdict},
    ) as run:
        run.log_params(
            {
                "reward_fn": fn.label,
                "reward_sha256": fn.version,
                "policy_version": policy_version or "",
                "report_uri": json_uri,
            }
        )
        rw = report["reward"]
        metrics = {
            "stress.passed": float(report["passed"]),
            "stress.findings": float(len(rw["findings"])),
            "stress.probes_failed": float(sum(not p["passed"] for p in rw["probes"])),
        }
        for p in rw["probes"]:
            metrics[f"stress.probe_advantage/{p['name'].replace(':', '_')}"] = p["advantage"]
        for r in report.get("policy") or []:
            metrics[f"stress.policy_return/{r['scenario']}"] = r["mean_return"]
            metrics[f"stress.policy_completion/{r['scenario']}"] = r["completion_rate"]
        run.log_metrics(metrics, step=0)
        run.log_dict(report, "stress/report.json")
        run.log_text(page, "stress/report.html")
        run_id = run.run_id
    tags = {"stress_test": verdict, "stress_report": json_uri, "stress_run_id": run_id}
    if policy_version is not None and not Path(policy_version).is_dir():
        tracker.set_model_version_tags(policy_model_name(ctx.scenario), policy_version, tags)
    rf_version = tracker.find_version_by_tag(reward_fn_model_name(ctx.scenario), "sha256", fn.version)
    if rf_version is not None:  # tag the registered reward function too, when it is registered
        tracker.set_model_version_tags(reward_fn_model_name(ctx.scenario), rf_version, tags)
    return run_id

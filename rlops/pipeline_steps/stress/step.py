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

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.params_promotion import StressConfig  # the typed ``stress:`` params block
from rlops.common.progress import progress_bar
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.policy_loader import greedy_act, load_policy_ref, resolve
from rlops.pipeline_steps.stress.report import render_html, report_dict
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.registry import tags as T
from rlops.registry.client import CHAMPION, policy_model_name, reward_fn_model_name
from rlops.sandbox.profiles import default_profile

if TYPE_CHECKING:  # the computations (torch, the sandbox) are imported where they run
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.policy_loader import LoadedPolicy
    from rlops.pipeline_steps.infra.services import StepServices
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
    from rlops.pipeline_steps.stress.checks import RewardStress, check_reward, reward_simulations, visibility_coverage
    from rlops.pipeline_steps.stress.edge_states import edge_states
    from rlops.pipeline_steps.stress.probes import run_gaming_probes

    S, counts = edge_states(pack, fn, cfg.edge_states, cfg.seed)
    bound = fn.clip if fn.clip is not None else cfg.reward_bound
    coverage, findings, dead = check_reward(pack, fn, S, bound, cfg.sum_tolerance, sims=reward_simulations(pack))
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
    from rlops.pipeline_steps.stress.perturbation import STRESS_PROFILE, perturbed_pack
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


# --------------------------------------------------------------------------- step
def resolve_reward_fn(pack: Pack, reward_fn: str | None) -> RewardFunction:
    """A reward function by file path, or by label (``v1``) of the pack."""
    from rlops.sandbox.reward_loading import load_reward_fn

    if reward_fn and Path(reward_fn).is_file():
        return load_reward_fn(Path(reward_fn), pack.rules, pack.scenario.action_names, roles=pack.scenario.role_names)
    try:
        return pack.reward_fn(Path(reward_fn).stem.removeprefix("reward_") if reward_fn else None)
    except KeyError as exc:
        raise ValueError(f"--reward-fn {reward_fn!r}: no such file, and {exc.args[0]}") from None


def champion_reference(ctx: StepServices, candidate: LoadedPolicy) -> LoadedPolicy | None:
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


@dataclass(frozen=True)
class StressSetup:
    """One stress test's inputs, resolved where its request enters."""

    request: StressRequest
    """The options as asked (the reward function, the policy version)."""
    stress: StressConfig
    """The params' ``stress:`` block: edge states, probes, perturbations, floors."""
    pack: Pack
    """The scenario pack, compiled once: the latest calibration applied, the signals in force bound."""
    reward_fn: RewardFunction
    """The reward function stressed: the request's (a label of the pack or a file), else the run's."""


def resolve_stress(ctx: StepContext, request: StressRequest | None = None, pack: Pack | None = None) -> StressSetup:
    """The :class:`StressSetup` of ``request`` in the run of ``ctx``; ``pack``: the scenario pack
    when the caller has compiled it already (with the latest calibration), else it is compiled here."""
    request = request or StressRequest()
    cfg = ctx.config.stress
    pack = pack if pack is not None else ctx.load_pack()
    fn = resolve_reward_fn(pack, request.reward_fn or ctx.reward_choice(None, pack).reward_fn)
    return StressSetup(request, cfg, pack, fn)


def stress_test(ctx: StepContext, request: StressRequest | None = None, progress: bool = False) -> StressSummary:
    """Run the stress test of the request's reward function and, with its ``policy_version``, of
    that policy under the perturbations; write its report (JSON and HTML) unless the run is dry.
    ``progress`` draws a bar over its stages (reward checks, then the policy runs) on stderr."""
    return run_stress(ctx, resolve_stress(ctx, request), progress)


def run_stress(services: StepServices, setup: StressSetup, progress: bool = False) -> StressSummary:
    """The stress test of ``setup`` (see :func:`stress_test`)."""
    policy_version = setup.request.policy_version
    cfg, pack, fn = setup.stress, setup.pack, setup.reward_fn
    loaded = load_policy_ref(services, policy_version) if policy_version is not None else None
    if policy_version is not None and loaded is None:
        raise UserError(f"policy {policy_version!r}: that alias is not set for {services.scenario}")
    with progress_bar(progress, total=1 + (loaded is not None), desc="stress", unit="stage") as bar:
        bar.set_postfix_str("reward checks and gaming probes")
        reward = stress_reward_fn(pack, fn, cfg)
        bar.update()
        policy_rows = None
        if loaded is not None:
            policy_version = loaded.version  # the registry version, whatever spelling named it
            bar.set_postfix_str(f"policy v{policy_version} under {len(cfg.perturbations)} perturbations")
            champion = champion_reference(services, loaded)
            policy_rows = stress_policy(
                pack, fn, greedy_act(loaded.network), cfg, greedy_act(champion.network) if champion else None
            )
            bar.update()
    meta = {
        "scenario": services.scenario,
        "run_key": services.run_key,
        "reward_fn_file": fn.path,
        "policy_version": policy_version,
        "config": cfg.model_dump(mode="json"),
    }
    report = report_dict(reward, policy_rows, meta)
    folder = (f"v{policy_version}",) if policy_version is not None else ()
    json_uri, html_uri = (services.report_uri("stress", *folder, f) for f in ("report.json", "report.html"))
    run_id = None
    if not services.dry_run:
        page = render_html(report)
        services.storage.write_json(json_uri, report)
        services.storage.write_text(html_uri, page)
        run_id = _track(services, report, page, fn, policy_version, json_uri)
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
        dry_run=services.dry_run,
        run_id=run_id,
    )


def _track(
    ctx: StepServices, report: dict[str, Any], page: str, fn: RewardFunction, policy_version: str | None, json_uri: str
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

"""Off-policy evaluation: the estimators pinned on hand-checkable episodes, the propensities read
from trace rows, and on sandbox traffic logged with known propensities the DR interval covering the
candidate's true value (the sandbox knows it); the gate is skipped with its reason when the traffic
cannot judge."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.pipeline_steps.promotion.ope import (
    Episodes,
    OPEConfig,
    dr_values,
    effective_sample_size,
    estimate_all,
    logged_propensities,
    mean_estimate,
    pdis_values,
    target_probabilities,
    to_episodes,
    wis_value,
)
from rlops.pipeline_steps.promotion.ope_direct import exploring_policy, fit_linear_q, returns_to_go, sandbox_q
from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row, ope_metrics, ope_run_fields, sim_to_real_gap
from rlops.pipeline_steps.promotion.ope_value import OPEResult, network_target, off_policy_value
from rlops.pipeline_steps.promotion.request import EvaluateRequest
from rlops.registry import tags as T
from tests.policy_kit import pack  # noqa: F401  (fixture)


def _two_episodes() -> Episodes:
    # episode 0: two steps, ρ = (2, 0.5), r = (1, 3); episode 1: one step, ρ = 0.5, r = 4 (padded)
    return to_episodes(
        np.array(["b", "a", "a"]),
        np.array([0, 1, 0]),
        np.array([0.5, 0.5, 2.0]),
        np.array([4.0, 3.0, 1.0]),
        np.array([1.0, 2.0, 0.5]),
        np.array([1.5, 2.5, 1.0]),
    )


def test_to_episodes_pads_after_the_end() -> None:
    ep = _two_episodes()
    np.testing.assert_allclose(ep.rho, [[2.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(ep.reward, [[1.0, 3.0], [4.0, 0.0]])
    np.testing.assert_array_equal(ep.valid, [[True, True], [True, False]])


def test_pdis_wis_dr_by_hand() -> None:
    ep = _two_episodes()
    # w = [[2, 1], [0.5, 0.5]]
    np.testing.assert_allclose(pdis_values(ep), [2 * 1 + 1 * 3, 0.5 * 4])
    # per-decision WIS: t0 (2·1 + 0.5·4)/(2.5) = 1.6; t1 (1·3 + 0.5·0)/1.5 = 2
    assert wis_value(ep.rho, ep.reward) == pytest.approx(3.6)
    # DR: Σ_t w_t (r_t − Q_t) + w_{t−1} V_t
    ep0 = 2 * (1 - 0.5) + 1 * 1.0 + 1 * (3 - 2.0) + 2 * 2.5
    ep1 = 0.5 * (4 - 1.0) + 1 * 1.5
    np.testing.assert_allclose(dr_values(ep), [ep0, ep1])
    # without a direct method DR is PDIS
    bare = Episodes(ep.rho, ep.reward, np.zeros_like(ep.rho), np.zeros_like(ep.rho), ep.valid)
    np.testing.assert_allclose(dr_values(bare), pdis_values(bare))
    assert effective_sample_size(ep.rho) == pytest.approx((1 + 0.5) ** 2 / (1 + 0.25))


def test_dr_with_the_exact_q_has_no_variance_on_the_target_policy() -> None:
    # On-policy (ρ = 1) with Q̂ equal to the realised return-to-go, every episode's DR term is V̂(s0).
    rho = np.ones(4)
    ep = to_episodes(
        np.array([0, 0, 1, 1]),
        np.array([0, 1, 0, 1]),
        rho,
        np.array([1.0, 2.0, 0.0, 5.0]),
        np.array([3.0, 2.0, 5.0, 5.0]),
        np.array([4.0, 2.0, 4.0, 5.0]),
    )
    np.testing.assert_allclose(dr_values(ep), [4.0 + 0 + 0, 4.0 + 0 + 0])


def test_intervals_normal_and_bootstrap() -> None:
    v = np.array([1.0, 2.0, 3.0, 4.0])
    normal = mean_estimate("dr", v, OPEConfig())
    se = np.std(v, ddof=1) / 2
    assert normal.value == 2.5 and normal.se == pytest.approx(se)
    assert normal.high - 2.5 == pytest.approx(1.959964 * se, rel=1e-5) and normal.ci == "normal"
    boot = mean_estimate("dr", v, OPEConfig(ci="bootstrap", bootstrap_samples=500))
    assert boot.ci == "bootstrap" and 1.0 <= boot.low < 2.5 < boot.high <= 4.0
    est = estimate_all(_two_episodes(), OPEConfig(bootstrap_samples=200))
    assert set(est) == {"pdis", "wis", "dr", "sndr", "switch_dr"} and est["wis"].ci == "bootstrap"


def test_target_probabilities_and_logged_propensities() -> None:
    logp = np.log(np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]]))
    mask = np.array([[True, False, True], [True, True, True]])
    np.testing.assert_allclose(target_probabilities(logp, mask, greedy=True), [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_allclose(target_probabilities(logp, mask, greedy=False), [[0.2, 0, 0.3], [0.6, 0.3, 0.1]])
    rows = pd.DataFrame(
        {
            "logp": [math.log(0.25), math.log(0.5), 0.0, None],
            "propensity": [None, 0.4, None, None],
            "fallback": [False, False, True, False],
        }
    )
    mu = logged_propensities(rows)
    np.testing.assert_allclose(mu[:3], [0.25, 0.4, 1.0])  # propensity wins over logp; a fallback is 1
    assert math.isnan(mu[3])


def test_fit_linear_q_recovers_a_linear_value_per_action() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2))
    a = rng.integers(0, 2, size=400)
    y = np.where(a == 0, 1 + 2 * x[:, 0], -1 + 3 * x[:, 1])
    q = fit_linear_q(x, a, y, n_actions=3, ridge=1e-6)
    pred = q.predict(np.array([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_allclose(pred[:, 0], [3.0, 1.0], atol=1e-3)
    np.testing.assert_allclose(pred[:, 1], [-1.0, 2.0], atol=1e-3)
    assert pred[0, 2] == pytest.approx(y.mean())  # never taken: the mean
    frame = pd.DataFrame({"episode_id": ["e", "e", "f"], "step": [1, 0, 0], "reward_total": [2.0, 1.0, 5.0]})
    np.testing.assert_allclose(returns_to_go(frame), [2.0, 3.0, 5.0])


@pytest.fixture(scope="module")
def logged(pack):  # type: ignore[no-untyped-def]
    """Live traffic of the credit pack served by an exploring logger around network A, and a
    candidate network B (greedy) whose true live value the sandbox gives."""
    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.sandbox.policies import evaluate_policy
    from rlops.sandbox.traces import rollout_traces

    # two untrained networks; over four such draws DR's standard error is 0.12-0.24 of PDIS's in three
    # and 1.05 in one (seeds 3/4 since the credit pack's region field), so the test pins a typical draw
    torch.manual_seed(5)
    behaviour = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout)).eval()
    logger = exploring_policy(network_target(behaviour, greedy=False), 0.3, seed=1)
    rows = rollout_traces(
        pack, logger, 1500, seed=11, profile="live", reward_fn="v1", source="live", episode_prefix="live"
    )
    torch.manual_seed(6)
    candidate = network_target(PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout)).eval(), greedy=True)
    truth = evaluate_policy(
        pack,
        lambda env: torch.as_tensor(candidate(env.observe(), env.action_masks())).argmax(1),
        episodes=20000,
        seed=10**6,
        profile="live",
        reward_fn="v1",
    ).mean_return
    return pack, rows, behaviour, candidate, truth


def test_observations_rebuilt_from_rows_reproduce_the_logged_propensities(logged) -> None:  # type: ignore[no-untyped-def]
    from rlops.trace_store.states import action_codes, observations_from_traces

    pack, rows, behaviour, _, _ = logged
    obs, mask = observations_from_traces(pack, rows)
    pi = network_target(behaviour, greedy=False)(obs, mask)
    n_legal = mask.numpy().sum(axis=1)
    a = action_codes(pack, rows["action"])
    mu = 0.7 * pi[np.arange(len(rows)), a] + 0.3 / n_legal
    np.testing.assert_allclose(mu, np.exp(rows["logp"].to_numpy()), rtol=1e-4)


def test_dr_covers_the_true_live_value(logged) -> None:  # type: ignore[no-untyped-def]
    pack, rows, _, candidate, truth = logged
    q = sandbox_q(pack, candidate, episodes=600, explore=0.3, ridge=1.0, profile="sandbox", reward_label="v1", seed=0)
    res = off_policy_value(pack, rows, candidate, OPEConfig(min_ess=10), q)
    assert res.skipped is None and res.episodes == 1500
    for name in ("pdis", "wis", "dr"):  # unbiased (PDIS, DR) or consistent (WIS): within 3 standard errors
        est = res.estimates[name]
        assert abs(est.value - truth) < 3 * est.se, (name, est, truth)
    assert res.estimates["dr"].se < 0.6 * res.estimates["pdis"].se  # the direct method pays for itself
    row = ope_gate_row(res, OPEConfig()).to_dict()
    assert row["gate"] == "ope:dr" and row["status"] in ("pass", "fail")
    assert row["champion"] == pytest.approx(res.logged_return, abs=1e-6)
    # a sandbox estimate far outside DR's interval is a sim-to-real gap; a close one is not
    assert sim_to_real_gap(res, res.estimates["dr"].value + 1.0, OPEConfig()) == pytest.approx(1.0)
    assert sim_to_real_gap(res, res.estimates["dr"].value, OPEConfig()) is None


def test_thin_or_propensity_less_traffic_skips_with_a_reason(logged) -> None:  # type: ignore[no-untyped-def]
    pack, rows, _, candidate, _ = logged
    few = rows[rows["episode_id"].isin(rows["episode_id"].unique()[:50])]
    res = off_policy_value(pack, few, candidate, OPEConfig())
    assert res.skipped and "50 complete live episodes" in res.skipped
    assert ope_gate_row(res, OPEConfig()).to_dict()["status"] == "skipped"
    blind = rows.assign(logp=np.nan)
    res = off_policy_value(pack, blind, candidate, OPEConfig())
    assert res.skipped and "no usable propensity" in res.skipped
    res = off_policy_value(pack, rows, candidate, OPEConfig(min_ess=10**6))
    assert res.skipped and "effective sample size" in res.skipped
    # an episode cut by the window (no step 0) is not judged
    cut = rows[~((rows["episode_id"] == rows["episode_id"].iloc[0]) & (rows["step"] == 0))]
    assert off_policy_value(pack, cut, candidate, OPEConfig(min_ess=1)).episodes == 1499


def test_traffic_served_without_exploration_cannot_judge_a_candidate_that_acts_otherwise(pack) -> None:  # type: ignore[no-untyped-def]
    """An agent that does not explore logs propensity 1 on every decision: where a better candidate
    would act otherwise its episode weighs 0, so the estimates lean toward the served policy and
    would fail the candidate. The gate is skipped with that reason instead; the same champion
    exploring a little gives traffic the gate can judge."""
    from rlops.sandbox.policies import evaluate_policy
    from rlops.sandbox.traces import rollout_traces
    from tests.policy_kit import approve_all_policy, cloned_rules_policy

    torch.set_num_threads(1)
    champion = network_target(approve_all_policy(pack), greedy=True)
    candidate = network_target(cloned_rules_policy(pack), greedy=True)

    def live(explore: float) -> pd.DataFrame:
        logger = exploring_policy(champion, explore, seed=2)
        return rollout_traces(
            pack, logger, 600, seed=77, profile="live", reward_fn="v1", source="live", episode_prefix="live"
        )

    greedy_rows = live(0.0)
    np.testing.assert_allclose(np.exp(greedy_rows["logp"].to_numpy()), 1.0)
    q = sandbox_q(pack, candidate, episodes=300, explore=0.3, ridge=1.0, profile="sandbox", reward_label="v1", seed=0)
    res = off_policy_value(pack, greedy_rows, candidate, OPEConfig(min_ess=10), q)
    assert res.skipped and "near certainty" in res.skipped and "exploration" in res.skipped
    assert ope_gate_row(res, OPEConfig()).to_dict()["status"] == "skipped"

    # unchecked, the episodes where the candidate acts otherwise count as worth 0: PDIS sits more
    # than a standard error below the candidate's true live value
    truth = evaluate_policy(
        pack,
        lambda env: torch.as_tensor(candidate(env.observe(), env.action_masks())).argmax(1),
        episodes=5000,
        seed=10**6,
        profile="live",
        reward_fn="v1",
    ).mean_return
    unchecked = OPEConfig(min_ess=10, max_unsupported=1.0, tolerance=10.0, mean_weight_band=0.9)
    blind = off_policy_value(pack, greedy_rows, candidate, unchecked, q)
    pdis = blind.estimates["pdis"]
    assert blind.skipped is None and truth - pdis.value > pdis.se

    explored = off_policy_value(pack, live(0.3), candidate, OPEConfig(min_ess=10, tolerance=10.0), q)
    assert explored.skipped is None, explored.skipped


def test_the_run_fields_say_state_reason_and_settings() -> None:
    cfg = OPEConfig(ci="bootstrap", confidence=0.9)
    skipped = ope_gate_row(OPEResult(episodes=3, skipped="3 complete live episodes in the window"), cfg)
    params, tags = ope_run_fields([skipped], cfg)
    assert tags == {T.OPE_STATE: "skipped", T.OPE_REASON: "3 complete live episodes in the window"}
    assert params["ope.ci"] == "bootstrap" and params["ope.confidence"] == "0.9" and params["ope.target"] == "serving"
    assert ope_run_fields([], OPEConfig(enabled=False)) == (
        {},
        {T.OPE_STATE: "off", T.OPE_REASON: "ope.enabled is false"},
    )
    res = OPEResult(
        episodes=500,
        estimates={"dr": mean_estimate("dr", np.array([1.0, 1.2, 0.8, 1.0]), cfg)},
        ess=400,
        logged_return=1.0,
        logged_return_sd=0.5,
    )
    m = ope_metrics(res, 3.0, cfg)
    assert m["ope_sandbox_value"] == 3.0 and m["ope_sim_to_real_gap"] == pytest.approx(2.0)
    assert "ope_sim_to_real_gap" not in ope_metrics(res, 1.0, cfg) and "ope_sandbox_value" not in ope_metrics(
        res, None, cfg
    )


def test_bad_ope_settings_are_clear_errors() -> None:
    from rlops.common.params_sources import ParamsError, as_params

    with pytest.raises(ParamsError, match="ope.ci: Input should be 'normal' or 'bootstrap'"):
        as_params({"ope": {"ci": "magic"}})
    with pytest.raises(ParamsError, match="ope.frobnicate: unknown key"):
        as_params({"ope": {"frobnicate": 1}})
    assert as_params({"ope": {"min_ess": 5, "ci": "bootstrap"}}).ope.min_ess == 5.0


@pytest.mark.usefixtures("steps_load_pack", "tmp_tracking", "tmp_storage_root")
def test_the_evaluation_run_carries_the_ope_gate(pack) -> None:  # type: ignore[no-untyped-def]
    """Live traffic logged with propensities around the champion: ``evaluate_candidate`` judges the
    candidate on it (gate ``ope:dr`` in the table and ``ope_*`` metrics in the MLflow run)."""
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate
    from rlops.sandbox.traces import rollout_traces
    from rlops.trace_store.store import partition_path
    from tests.policy_kit import NAME, SCENARIO, approve_all_policy, cloned_rules_policy, register

    torch.set_num_threads(1)
    champion_net, candidate_net = approve_all_policy(pack), cloned_rules_policy(pack)
    ctx = StepContext.create(
        run_key="20260105T1000",
        overrides={
            "evaluate": {
                "episodes": 600,
                "bootstrap_samples": 500,
                "latency_samples": 50,
                "require_stress_test": False,
                "min_segment_episodes": 50,
                "segment_tolerance": 0.35,
            },
            "ope": {"dm_episodes": 300},
            "tracking": {"http_max_retries": 0},
        },
    )
    champ = register(ctx, pack, champion_net)
    ctx.tracker.set_alias(NAME, "champion", champ)
    cand = register(ctx, pack, candidate_net)
    logger = exploring_policy(network_target(champion_net, greedy=True), 0.3, seed=2)
    rows = rollout_traces(
        pack,
        logger,
        600,
        seed=77,
        profile="live",
        reward_fn="v1",
        source="live",
        policy_version=f"{SCENARIO}-policy/{champ}",
        episode_prefix="live",
        start_ts=datetime(2026, 1, 5, 9, 10, tzinfo=UTC),
    )
    ctx.storage.write_parquet(
        ctx.uri("traces", partition_path(scenario=SCENARIO, date="2026-01-05", hour=9), "part-ope.parquet"), rows
    )
    res = evaluate_candidate(ctx, EvaluateRequest(cand)).as_dict()
    gate = {g["gate"]: g for g in res["gates"]}["ope:dr"]
    assert gate["status"] == "pass", gate["detail"]
    assert gate["candidate"] > gate["champion"]  # the rules' clone earns more live than approving everyone
    run = ctx.tracker.client.get_run(res["eval_run_id"])
    assert {"ope_dr", "ope_dr_low", "ope_dr_high", "ope_pdis", "ope_wis", "ope_ess"} <= set(run.data.metrics)
    # what the console's off-policy section reads: every estimate's bounds, the sandbox estimate
    # DR is compared with, the settings of the intervals and the gate's state
    for name in ("pdis", "wis", "dr"):
        assert (
            run.data.metrics[f"ope_{name}_low"]
            <= run.data.metrics[f"ope_{name}"]
            <= run.data.metrics[f"ope_{name}_high"]
        )
    assert run.data.metrics["ope_sandbox_value"] == pytest.approx(res["candidate_summary"]["mean_return"], abs=1e-5)
    assert {"ope_logged_return", "ope_episodes", "ope_agreement"} <= set(run.data.metrics)
    # the sandbox's trust: the incumbent's sandbox value over its logged value, and the weights' diagnostics
    m = run.data.metrics
    assert m["ope_sim_to_real_ratio"] == pytest.approx(m["ope_incumbent_sandbox_value"] / m["ope_logged_return"])
    assert {"ope_max_weight", "ope_mean_weight", "ope_top_weight_share", "ope_sndr", "ope_switch_dr"} <= set(m)
    assert run.data.params["ope.ci"] == "normal" and run.data.params["ope.confidence"] == "0.95"
    assert run.data.params["ope.direct_method"] == "sandbox"
    assert run.data.tags[T.OPE_STATE] == "pass" and T.OPE_REASON not in run.data.tags
    assert any(n.startswith("off-policy: DR") for n in res["notes"])


def test_dr_with_the_reward_model_as_direct_method(logged) -> None:  # type: ignore[no-untyped-def]
    """The reward model's scores, mapped to reward units on the logged rows, as DR's Q̂: one value
    per action and row, and DR stays unbiased (whatever Q̂ is)."""
    from rlops.model.reward_model import RewardModel
    from rlops.pipeline_steps.promotion.ope_direct import reward_model_q

    pack, rows, _, candidate, truth = logged
    torch.manual_seed(0)
    model = RewardModel(pack.scenario.layout.n_features, pack.scenario.n_actions, 3)
    q = reward_model_q(pack, model, rows, rows["reward_total"].to_numpy(np.float64))
    assert q.shape == (len(rows), pack.scenario.n_actions) and np.isfinite(q).all()
    res = off_policy_value(pack, rows, candidate, OPEConfig(min_ess=10), q)
    assert abs(res.estimates["dr"].value - truth) < 3 * res.estimates["dr"].se


def test_unsupported_decisions_by_hand() -> None:
    from rlops.pipeline_steps.promotion.ope_sufficiency import unsupported_decisions

    episode = np.array(["a", "a", "b", "c", "d", "e"])
    mu = np.array([1.0, 0.5, 1.0, 1.0, 1.0, 0.995])  # a's second decision explored; e's left 0.5 % to the rest
    otherwise = np.array([False, True, True, True, False, True])  # where the candidate would act otherwise
    choice = np.array([True, True, True, False, True, True])  # c had one legal action: no decision
    cfg = OPEConfig(max_unsupported=0.4)
    assert unsupported_decisions(episode, mu, otherwise, choice, cfg) == (0.4, None)  # b and e, of 5
    share, reason = unsupported_decisions(episode, mu, otherwise, choice, OPEConfig(max_unsupported=0.2))
    assert share == 0.4 and reason and reason.startswith("2 of 5 live episodes (40%")
    # a logger that leaves 0.5 % to other actions supports the candidate once min_support is below that
    assert unsupported_decisions(episode, mu, otherwise, choice, OPEConfig(min_support=0.004))[0] == 0.2

"""The batched environment: action masks, observation encoding, autoreset, determinism (batched
equals single, seeds, checkpoints) and the simulation profiles, on the credit pack and on the
tiny ``counter`` pack of ``tests/data/packs``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.sandbox.env import BatchedEnv, IllegalActionError, NoLegalActionError
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import evaluate_policy, random_policy, rule_policy

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"
COUNTER = REPO / "tests" / "data" / "packs" / "counter"


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(CREDIT, check_liveness=False)


@pytest.fixture(scope="module")
def counter() -> Pack:
    return load_pack(COUNTER, check_liveness=False)


def col(pack: Pack, path: str) -> int:
    return pack.scenario.columns[path]


def act(pack: Pack, name: str, n: int = 1) -> torch.Tensor:
    return torch.full((n,), pack.scenario.action_names.index(name), dtype=torch.long)


def priority_policy(priorities: torch.Tensor):
    """Deterministic per-instance policy: at step t, the legal action with the highest
    ``priorities[i, t]``. The same table drives a batch and its single-instance replays."""

    def choose(masks: torch.Tensor, t: int) -> torch.Tensor:
        return torch.where(masks, priorities[:, t], torch.full_like(priorities[:, t], -1.0)).argmax(dim=1)

    return choose


# ------------------------------------------------------------------------------------ loading
def test_credit_pack_loads(credit: Pack) -> None:
    # (The liveness check of load_pack runs in test_cli_env's validate test.)
    pack = credit
    assert pack.name == "credit_approval"
    assert pack.scenario.action_names == (
        "initiate_fraud_check",
        "fetch_credit_report",
        "approve",
        "approve_reduced",
        "reject",
        "escalate_to_human",
        "send_notification",
    )
    assert set(pack.reward_fns) == {"v0", "v1"}
    assert pack.reward_fn().label == "v1"
    assert set(pack.scenario.profiles) == {"sandbox", "live"}


def test_unknown_profile_and_illegal_action_mode_are_rejected(credit: Pack) -> None:
    with pytest.raises(ValueError, match="unknown simulation profile 'prod'"):
        BatchedEnv(credit.scenario, credit.reward_fn(), 2, profile="prod")
    with pytest.raises(ValueError, match="illegal_action"):
        BatchedEnv(credit.scenario, credit.reward_fn(), 2, illegal_action="skip")


# ------------------------------------------------------------------------------------ masks
def test_illegal_action_raises_and_is_never_executed(credit: Pack) -> None:
    env = credit.make_env(4, seed=11)
    before = env.state_dict()
    masks_before = env.action_masks().clone()
    # approve is not legal at the start: credit score and fraud flag are not visible yet.
    with pytest.raises(IllegalActionError, match=r"action 2 \(approve\) is not legal in episode 0"):
        env.step(act(credit, "approve", 4))
    for bad in (7, -1):
        with pytest.raises(IllegalActionError, match="out of range"):
            env.step(torch.full((4,), bad))
    after = env.state_dict()
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    assert torch.equal(env.action_masks(), masks_before)


def test_one_illegal_row_rejects_the_whole_step(credit: Pack) -> None:
    env = credit.make_env(3, seed=2)
    S0 = env.S.clone()
    actions = act(credit, "initiate_fraud_check", 3)
    actions[1] = credit.scenario.action_names.index("send_notification")
    with pytest.raises(IllegalActionError, match="episode 1"):
        env.step(actions)
    assert torch.equal(env.S, S0)


def test_noop_mode_leaves_illegal_rows_unchanged_and_counts_them(credit: Pack) -> None:
    env = credit.make_env(6, seed=5, illegal_action="noop")
    S0 = env.S.clone()
    actions = act(credit, "initiate_fraud_check", 6)
    illegal_rows = torch.tensor([False, True, False, True, True, False])
    actions[illegal_rows] = credit.scenario.action_names.index("send_notification")
    _, _, term, trunc, info = env.step(actions)
    assert torch.equal(info.illegal, illegal_rows)
    n_fields = len(credit.scenario.spec.fields)
    # The scenario's fields of an illegal row are untouched; only the step counter moves on.
    assert torch.equal(env.S[illegal_rows, :n_fields], S0[illegal_rows, :n_fields])
    assert torch.equal(
        env.S[illegal_rows, col(credit, "episode.last_action")], S0[illegal_rows, col(credit, "episode.last_action")]
    )
    assert torch.equal(
        env.S[illegal_rows, col(credit, "episode.elapsed_ms")], S0[illegal_rows, col(credit, "episode.elapsed_ms")]
    )
    assert (env.S[:, col(credit, "episode.step")] == 1).all()
    assert (env.S[~illegal_rows, col(credit, "system_status.fraud_check_done")] == 1).all()
    assert not bool(info.error[illegal_rows].any())
    assert not bool((term | trunc).any())
    # Nothing ran, so nothing took time: the reported latency of an illegal row is 0, as in the state.
    assert (info.latency_ms[illegal_rows] == 0).all()
    assert (info.latency_ms[~illegal_rows] > 0).all()


def test_required_fields_hide_actions_until_visible(credit: Pack) -> None:
    env = credit.make_env(1, seed=3)
    names = credit.scenario.action_names

    def legal() -> set[str]:
        return {names[j] for j in env.action_masks()[0].nonzero().flatten().tolist()}

    decisions = {"approve", "approve_reduced", "reject"}
    # The decision is pending (the precondition holds) but the fields a decision needs are hidden.
    assert legal() == {"initiate_fraud_check", "fetch_credit_report", "escalate_to_human"}
    env.step(act(credit, "initiate_fraud_check"))
    assert not decisions & legal(), "credit score still hidden"
    env.step(act(credit, "fetch_credit_report"))
    assert decisions <= legal()
    assert "initiate_fraud_check" not in legal() and "fetch_credit_report" not in legal()


@pytest.mark.parametrize("profile", ["sandbox", "live"])
def test_every_reachable_state_has_a_legal_action(credit: Pack, profile: str) -> None:
    env = credit.make_env(256, profile=profile, seed=17)  # illegal_action="raise"
    policy = random_policy(seed=4)
    c = credit.scenario.columns
    a_approve = credit.scenario.action_names.index("approve")
    ends = 0
    for _ in range(3 * credit.scenario.spec.horizon):
        masks = env.action_masks()
        assert bool(masks.any(dim=1).all())
        # The mask of approve is exactly: pending, fraud check done, credit report fetched.
        S = env.S
        expected = (
            (S[:, c["decision.approval_result"]] == 0)
            & (S[:, c["system_status.fraud_check_done"]] > 0.5)
            & (S[:, c["system_status.credit_report_fetched"]] > 0.5)
        )
        assert torch.equal(masks[:, a_approve], expected)
        _, _, term, trunc, info = env.step(policy(env))
        assert not bool(info.illegal.any())
        ends += int((term | trunc).sum())
    assert ends > 256, "random rollouts went through autoresets"


def test_rule_policy_completes_every_episode(credit: Pack) -> None:
    res = evaluate_policy(credit, rule_policy, episodes=256, seed=0)
    s = res.summary()
    assert s["illegal_actions"] == 0
    assert s["completion_rate"] == 1.0
    assert (res.lengths == 4).all()  # fraud check, credit report, decision, notification


def test_dead_end_raises_no_legal_action(tmp_path: Path) -> None:
    text = (COUNTER / "scenario.yaml").read_text()
    pack_dir = tmp_path / "dead_end"
    pack_dir.mkdir()
    for f in ("rules.yaml", "reward_v1.py"):
        (pack_dir / f).write_text((COUNTER / f).read_text())
    # wait becomes legal only before the first bump and finish never: a bump leaves a state with
    # at most "bump" legal, and at counter 10 nothing at all.
    text = text.replace(
        "    description: Do nothing (always legal)", '    description: Do nothing\n    precondition: "counter == 0"'
    )
    text = text.replace("    terminal: true", '    terminal: true\n    precondition: "false"')
    (pack_dir / "scenario.yaml").write_text(text.replace("horizon: 6", "horizon: 20"))
    pack = load_pack(pack_dir, check_liveness=False)
    env = pack.make_env(2)
    with pytest.raises(NoLegalActionError, match="no legal action"):
        for _ in range(20):
            env.step(act(pack, "bump", 2))


# ------------------------------------------------------------------------------------ observation
def test_observation_layout_and_hidden_fields(credit: Pack) -> None:
    layout = credit.scenario.layout
    assert layout.dim == layout.n_features + credit.scenario.n_actions + credit.scenario.spec.history_len
    assert not any(n.startswith("hidden.") for n in layout.feature_names), "observed: false stays out"
    env = credit.make_env(8, seed=1)
    obs = env.observe()
    assert obs.shape == (8, layout.dim)
    masks_part = obs[:, layout.n_features : layout.n_features + credit.scenario.n_actions]
    assert torch.equal(masks_part.bool(), env.action_masks())
    assert (obs[:, layout.n_features + credit.scenario.n_actions :] == 0).all(), "empty history"


def test_a_field_reads_zero_until_visible(credit: Pack) -> None:
    names = credit.scenario.layout.feature_names
    i_cs, i_present = names.index("user_profile.credit_score"), names.index("user_profile.credit_score?present")
    env = credit.make_env(4, seed=9)
    score = env.S[:, col(credit, "user_profile.credit_score")].clone()
    obs = env.observe()
    assert (obs[:, i_cs] == 0).all() and (obs[:, i_present] == 0).all()
    env.step(act(credit, "fetch_credit_report", 4))
    obs = env.observe()
    assert (obs[:, i_present] == 1).all()
    # Bounded numbers are mapped to [-1, 1]: (x - mid) * 2 / (max - min), score in [300, 900].
    assert torch.allclose(obs[:, i_cs], (score - 600.0) / 300.0)
    history = obs[:, -credit.scenario.spec.history_len :]
    assert (history[:, -1] == credit.scenario.action_names.index("fetch_credit_report") + 1).all()


# ------------------------------------------------------------------------------------ autoreset
def test_same_step_autoreset(credit: Pack) -> None:
    env = credit.make_env(3, seed=20)
    layout = credit.scenario.layout
    i_progress = layout.feature_names.index("episode.progress")
    env.step(act(credit, "escalate_to_human", 3))  # terminal at once
    # ... happened above; now check a full episode with its final observation
    env = credit.make_env(3, seed=20)
    for name in ("initiate_fraud_check", "fetch_credit_report", "reject"):
        obs, reward, term, trunc, info = env.step(act(credit, name, 3))
        assert not bool((term | trunc).any())
        assert torch.equal(obs, info.final_obs)
    obs, reward, term, trunc, info = env.step(act(credit, "send_notification", 3))
    assert bool(term.all()) and not bool(trunc.any())
    assert torch.allclose(info.final_obs[:, i_progress], torch.full((3,), 4 / credit.scenario.spec.horizon))
    assert (obs[:, i_progress] == 0).all(), "the returned observation starts the next episode"
    assert (obs[:, -credit.scenario.spec.history_len :] == 0).all()
    assert (env.S[:, col(credit, "decision.approval_result")] == 0).all()
    assert torch.equal(env.episodes, torch.ones(3, dtype=torch.long))
    assert torch.equal(info.episode_length, torch.full((3,), 4.0))
    assert torch.allclose(info.episode_return, info.episode_return)  # finite
    # The next episode of an instance is a new applicant.
    fresh = BatchedEnv(credit.scenario, credit.reward_fn(), 3)
    fresh.reset(20)
    assert not torch.equal(env.S[:, :5], fresh.S[:, :5])


def test_terminal_and_human_takeover_flags(credit: Pack) -> None:
    env = credit.make_env(2, seed=4)
    _, _, term, trunc, info = env.step(act(credit, "escalate_to_human", 2))
    assert bool(term.all()) and not bool(trunc.any())
    assert bool(info.human_takeover.all())


def test_truncation_at_the_horizon(counter: Pack) -> None:
    env = counter.make_env(2)
    for t in range(counter.scenario.spec.horizon):
        _, _, term, trunc, info = env.step(act(counter, "wait", 2))
        assert not bool(term.any())
        assert bool(trunc.all()) == (t == counter.scenario.spec.horizon - 1)
    assert (env.S[:, col(counter, "episode.step")] == 0).all()


def test_effects_are_applied_and_clamped_to_the_range(counter: Pack) -> None:
    env = counter.make_env(1)
    env.step(act(counter, "bump"))
    assert env.S[0, col(counter, "counter")] == 1
    assert env.S[0, col(counter, "mode")] == 1  # busy
    c = col(counter, "counter")
    env.S[:, c] = 9.0
    env._masks = counter.scenario.action_masks(env.S)
    env.step(act(counter, "bump"))
    assert env.S[0, c] == 10
    assert not bool(env.action_masks()[0, 1]), "bump is not legal at the maximum"


# ------------------------------------------------------------------------------------ determinism
def _trajectory(env: BatchedEnv, choose, steps: int) -> list[tuple[torch.Tensor, ...]]:
    out = []
    for t in range(steps):
        obs, reward, term, trunc, info = env.step(choose(env.action_masks(), t))
        out.append(
            (
                obs.clone(),
                reward.clone(),
                term.clone(),
                trunc.clone(),
                info.final_obs.clone(),
                info.reward_breakdown.clone(),
            )
        )
    return out


@pytest.mark.parametrize("profile", ["sandbox", "live"])
def test_batched_equals_single(credit: Pack, profile: str) -> None:
    n, steps, seed = 5, 36, 300
    pri = torch.rand(n, steps, credit.scenario.n_actions, generator=torch.Generator().manual_seed(1))
    batch = BatchedEnv(credit.scenario, credit.reward_fn(), n, profile=profile)
    obs0 = batch.reset(seed)
    traj = _trajectory(batch, priority_policy(pri), steps)
    assert sum(int((t[2] | t[3]).sum()) for t in traj) >= 2 * n, "several episodes with autoresets"
    for i in range(n):
        single = BatchedEnv(credit.scenario, credit.reward_fn(), 1, profile=profile)
        assert torch.equal(single.reset(seed + i)[0], obs0[i])
        one = _trajectory(single, priority_policy(pri[i : i + 1]), steps)
        for t in range(steps):
            for k, name in enumerate(("obs", "reward", "terminated", "truncated", "final_obs", "breakdown")):
                assert torch.equal(one[t][k][0], traj[t][k][i]), f"instance {i} step {t}: {name} differs"


def test_same_seed_same_trajectory_and_different_seeds_differ(credit: Pack) -> None:
    pri = torch.rand(16, 25, credit.scenario.n_actions, generator=torch.Generator().manual_seed(2))
    runs = []
    for seed in (7, 7, 8):
        env = BatchedEnv(credit.scenario, credit.reward_fn(), 16, profile="live")
        env.reset(seed)
        runs.append(_trajectory(env, priority_policy(pri), 25))
    for a, b in zip(runs[0], runs[1]):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    assert any(not torch.equal(a[0], c[0]) for a, c in zip(runs[0], runs[2]))
    assert not torch.equal(torch.stack([a[1] for a in runs[0]]), torch.stack([c[1] for c in runs[2]]))


def test_per_instance_seed_tensor(credit: Pack) -> None:
    env = BatchedEnv(credit.scenario, credit.reward_fn(), 3)
    obs = env.reset(torch.tensor([40, 10, 99]))
    for i, s in enumerate((40, 10, 99)):
        one = BatchedEnv(credit.scenario, credit.reward_fn(), 1)
        assert torch.equal(one.reset(s)[0], obs[i])


def test_state_dict_continues_identically(credit: Pack) -> None:
    n, steps = 8, 30
    pri = torch.rand(n, 2 * steps, credit.scenario.n_actions, generator=torch.Generator().manual_seed(3))
    choose = priority_policy(pri)
    env = credit.make_env(n, profile="live", seed=50)
    _trajectory(env, choose, steps)
    snapshot = env.state_dict()
    rest = _trajectory(env, lambda m, t: choose(m, t + steps), steps)
    restored = BatchedEnv(credit.scenario, credit.reward_fn(), n, profile="live")
    restored.load_state_dict(snapshot)
    assert restored.global_step == n * steps
    again = _trajectory(restored, lambda m, t: choose(m, t + steps), steps)
    for a, b in zip(rest, again):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


def test_random_events_depend_on_the_state_not_the_call_order(credit: Pack) -> None:
    # The same instance seed and state replay the same latency draw, whatever ran before.
    a = credit.make_env(1, profile="live", seed=123)
    b = credit.make_env(1, profile="live", seed=123)
    for _ in range(3):  # burn unrelated draws in another instance
        credit.make_env(4, profile="live", seed=9).step(act(credit, "initiate_fraud_check", 4))
    _, _, _, _, ia = a.step(act(credit, "fetch_credit_report"))
    _, _, _, _, ib = b.step(act(credit, "fetch_credit_report"))
    assert torch.equal(ia.latency_ms, ib.latency_ms)


# ------------------------------------------------------------------------------------ profiles
def test_live_profile_differs_from_sandbox(credit: Pack) -> None:
    n = 3000
    stats = {}
    for profile in ("sandbox", "live"):
        env = credit.make_env(n, profile=profile, seed=1000)
        age = env.S[:, col(credit, "user_profile.age")].clone()
        segment = env.S[:, col(credit, "episode.segment")].clone()
        lat, err, steps = 0.0, 0.0, 0
        for _ in range(4):  # the rule policy finishes every episode in 4 steps
            _, _, _, _, info = env.step(rule_policy(env))
            lat += float(info.latency_ms.sum())
            err += float(info.error.float().sum())
            steps += n
        stats[profile] = {"age": age, "segment": segment, "latency": lat / steps, "error": err / steps}
    sb, live = stats["sandbox"], stats["live"]
    assert (sb["segment"] == 0).all()
    elderly = live["segment"] == 1
    assert 0.12 < float(elderly.float().mean()) < 0.18  # probability 0.15
    assert abs(float(live["age"][elderly].mean()) - 72) < 1.5
    assert float(live["age"].mean()) - float(sb["age"].mean()) > 3.0  # 0.15 * (72 - 40) = 4.8
    # Jitter: uniform in [0, 100] ms vs [200, 1500] ms on top of the action latencies.
    assert live["latency"] - sb["latency"] > 600
    assert sb["error"] == 0.0
    assert 0.003 < live["error"] < 0.05  # fraud_api 1.2%, credit_bureau 2%, sms 3.7%


def test_evaluate_policy_reports_segments(credit: Pack) -> None:
    res = evaluate_policy(credit, rule_policy, episodes=400, seed=0, profile="live")
    assert res.segment_names == ["base", "elderly"]
    assert set(res.segments.unique().tolist()) <= {0.0, 1.0}
    assert res.summary()["illegal_actions"] == 0


def test_population_shift_overrides_every_kind_of_init(counter: Pack) -> None:
    # Shift overrides must win whatever the base init is: a constant base with a distribution in
    # the shift (flag), a distribution base with a constant in the shift (lucky), constant over
    # constant (mode), distribution over distribution (level).
    env = counter.make_env(2000, profile="shifted", seed=0)
    S = env.S
    shifted = S[:, col(counter, "episode.segment")] == 1
    assert 0.45 < float(shifted.float().mean()) < 0.55
    for path, value_shifted, value_base in (("mode", 1.0, 0.0), ("flag", 1.0, 0.0), ("lucky", 1.0, 0.0)):
        c = col(counter, path)
        assert (S[shifted, c] == value_shifted).all(), f"{path} of a shifted episode"
        assert (S[~shifted, c] == value_base).all(), f"{path} of a base episode"
    level = S[:, col(counter, "level")]
    assert (level[shifted] >= 0.9).all()
    assert float(level[~shifted].min()) < 0.5


def _counter_variant(tmp_path: Path, old: str, new: str) -> Pack:
    dst = tmp_path / "counter"
    dst.mkdir()
    for f in ("rules.yaml", "reward_v1.py"):
        (dst / f).write_text((COUNTER / f).read_text())
    text = (COUNTER / "scenario.yaml").read_text()
    assert old in text
    (dst / "scenario.yaml").write_text(text.replace(old, new))
    return load_pack(dst, check_liveness=False)


def test_a_hidden_enum_reads_as_an_all_zero_block(tmp_path: Path) -> None:
    pack = _counter_variant(
        tmp_path,
        "mode: {type: enum, values: [idle, busy], init: idle}",
        'mode: {type: enum, values: [idle, busy], init: idle, visible_when: "counter > 0"}',
    )
    names = pack.scenario.layout.feature_names
    block = [names.index("mode=idle"), names.index("mode=busy")]
    present = names.index("mode?present")
    env = pack.make_env(2)
    obs = env.observe()
    assert (obs[:, block] == 0).all() and (obs[:, present] == 0).all()
    obs, *_ = env.step(act(pack, "bump", 2))
    assert obs[:, block].tolist() == [[0.0, 1.0], [0.0, 1.0]] and (obs[:, present] == 1).all()


def test_effect_when_and_prob(tmp_path: Path) -> None:
    pack = _counter_variant(
        tmp_path,
        '      - set: {counter: "counter + 1", mode: busy}',
        '      - set: {counter: "counter + 1"}\n        prob: 0.25\n'
        '      - set: {mode: busy}\n        when: "counter >= 1"\n'
        '      - set: {level: "uniform(0.5, 0.75)", flag: "bernoulli(0.5)"}',
    )
    env = pack.make_env(4000, seed=1)
    S0 = env.S.clone()
    env.step(act(pack, "bump", 4000))
    S = env.S
    bumped = S[:, col(pack, "counter")] == 1
    assert 0.22 < float(bumped.float().mean()) < 0.28
    # Effects apply in order: ``when`` sees the counter the first effect just set.
    assert torch.equal(S[:, col(pack, "mode")] == 1, bumped)
    level = S[:, col(pack, "level")]
    assert bool(((level >= 0.5) & (level < 0.75)).all()) and not torch.equal(level, S0[:, col(pack, "level")])
    assert 0.45 < float(S[:, col(pack, "flag")].mean()) < 0.55


@pytest.mark.gpu
@pytest.mark.parametrize("profile", ["sandbox", "live"])
def test_cuda_matches_cpu(credit: Pack, profile: str) -> None:
    # Counter-based randomness makes a trajectory a function of seeds, states and actions only:
    # the accelerator path (which re-samples every row on autoreset) must replay the CPU one.
    n, steps = 64, 30
    pri = torch.rand(n, steps, credit.scenario.n_actions, generator=torch.Generator().manual_seed(6))
    runs = {}
    for device in ("cpu", "cuda"):
        env = BatchedEnv(credit.scenario, credit.reward_fn(), n, profile=profile, device=device)
        env.reset(77)
        traj = []
        for t in range(steps):
            masks = env.action_masks().cpu()
            actions = torch.where(masks, pri[:, t], torch.full_like(pri[:, t], -1.0)).argmax(dim=1)
            obs, reward, term, trunc, info = env.step(actions.to(device))
            traj.append([x.cpu() for x in (obs, reward, term, trunc, info.final_obs, info.reward_breakdown)])
        runs[device] = traj
    for t, (a, b) in enumerate(zip(runs["cpu"], runs["cuda"])):
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), f"step {t}, output {k}: cpu and cuda differ"


def test_calibration_overlay_loads_and_is_validated() -> None:
    # A calibration is built in code (plain dicts, no YAML lines) and validated like the YAML. It
    # writes the `calibrated` profile only: fitted fields become that profile's population, and
    # every other profile (the production stand-in `live` above all) stays as declared.
    calibration = {
        "fields": {"user_profile.age": {"dist": "normal", "mean": 60, "std": 5}},
        "simulation": {
            "profiles": {"calibrated": {"latency_jitter_ms": {"min": 10, "max": 20}, "error_rates": {"sms": 0.5}}}
        },
    }
    declared = load_pack(CREDIT, check_liveness=False)
    pack = load_pack(CREDIT, calibration=calibration, check_liveness=False)
    env = pack.make_env(2000, profile="calibrated", seed=0)
    assert abs(float(env.S[:, col(pack, "user_profile.age")].mean()) - 60) < 1.0
    assert pack.scenario.spec.profiles["calibrated"].error_rates == {"sms": 0.5}
    live, live0 = pack.make_env(2000, profile="live", seed=0), declared.make_env(2000, profile="live", seed=0)
    assert torch.equal(live.S, live0.S)
    assert pack.scenario.spec.profiles["live"] == declared.scenario.spec.profiles["live"]
    from rlops.sandbox.errors import PackError

    with pytest.raises(PackError, match="only the 'calibrated' profile"):
        load_pack(CREDIT, calibration={"simulation": {"profiles": {"live": {}}}}, check_liveness=False)
    bad = {"fields": {"user_profile.age": {"dist": "normal", "mean": 60, "std": -5}}}
    with pytest.raises(PackError, match="bad range: std -5 must be >= 0"):
        load_pack(CREDIT, calibration=bad, check_liveness=False)

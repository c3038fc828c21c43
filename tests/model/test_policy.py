"""The policy network: masking, masked entropy, the history attention, serving export, save/load."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rlops.model.fast_ops import fast_tanh, softmax_rows, sum_by_code
from rlops.model.masked_distributions import (
    greedy_actions,
    gumbel_sample,
    mask_value,
    masked_entropy,
    masked_log_probs,
    probs_of,
)
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import export_policy, load_exported, load_policy, save_policy

F, A, K = 11, 128, 4


def _obs(n: int, legal: torch.Tensor | None = None, seed: int = 0, n_actions: int = A) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, F, generator=g)
    if legal is None:
        legal = torch.rand(n, n_actions, generator=g) < 0.03
        legal[torch.arange(n), torch.randint(n_actions, (n,), generator=g)] = True
    hist = torch.randint(0, n_actions + 1, (n, K), generator=g).float()
    return torch.cat([feats, legal.float(), hist], dim=1)


@pytest.fixture(scope="module")
def policy() -> PolicyNetwork:
    torch.manual_seed(0)
    return PolicyNetwork(PolicyConfig(F, A, K, hidden_sizes=(32, 32), embed_dim=8))


def test_mask_value_is_finite_and_dominant() -> None:
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        v = mask_value(dt)
        assert math.isfinite(v) and v < -1e4


def test_masked_actions_get_zero_probability_and_no_nan_with_128_actions(policy: PolicyNetwork) -> None:
    legal = torch.zeros(64, A, dtype=torch.bool)
    legal[:, :3] = True  # 3 legal of 128
    legal[1] = False
    legal[1, 77] = True  # a single legal action
    obs = _obs(64, legal).requires_grad_(False)
    logp, value = policy(obs)
    p = logp.exp()
    assert torch.isfinite(logp).all() and torch.isfinite(value).all()
    assert (p[~legal] == 0).all()
    assert torch.allclose(p.sum(1), torch.ones(64))
    assert p[1, 77].item() == pytest.approx(1.0)
    ent = masked_entropy(logp, legal)
    # Entropy of the distribution restricted to the legal actions, computed directly.
    q = p[:, :3] / p[:, :3].sum(1, keepdim=True)
    direct = -(q * q.log()).sum(1)
    assert torch.allclose(ent[[0] + list(range(2, 64))], direct[[0] + list(range(2, 64))], atol=1e-5)
    assert ent[1].item() == pytest.approx(0.0, abs=1e-6)
    assert (ent <= math.log(3) + 1e-5).all()
    # Gradients through log-probs of legal actions and the entropy stay finite.
    loss = -(logp.gather(1, torch.zeros(64, 1, dtype=torch.long)).mean()) - ent.mean() + value.pow(2).mean()
    policy.zero_grad()
    loss.backward()
    assert all(torch.isfinite(prm.grad).all() for prm in policy.parameters() if prm.grad is not None)


def test_row_with_every_action_masked_is_uniform_not_nan() -> None:
    logits = torch.randn(2, A)
    mask = torch.zeros(2, A, dtype=torch.bool)
    logp = masked_log_probs(logits, mask)
    assert torch.isfinite(logp).all()
    assert torch.allclose(logp.exp(), torch.full((2, A), 1.0 / A))
    assert torch.isfinite(masked_entropy(logp, mask)).all()


def test_sampling_and_greedy_only_pick_legal_actions(policy: PolicyNetwork) -> None:
    obs = _obs(4096, seed=1)
    legal = obs[:, F : F + A] > 0.5
    out = policy.act(obs, generator=torch.Generator().manual_seed(0))
    assert legal.gather(1, out.action.unsqueeze(1)).all()
    greedy = policy.act(obs, deterministic=True)
    assert legal.gather(1, greedy.action.unsqueeze(1)).all()
    assert torch.equal(greedy.action, greedy.probs.argmax(1))
    assert torch.allclose(greedy.logp, greedy.probs.gather(1, greedy.action.unsqueeze(1)).squeeze(1).log())


def test_act_on_one_observation_matches_the_batch(policy: PolicyNetwork) -> None:
    obs = _obs(5, seed=2)
    batch = policy.act(obs, deterministic=True)
    one = policy.act(obs[3], deterministic=True)
    assert one.action.dim() == 0 and one.probs.shape == (A,)
    assert one.action.item() == batch.action[3].item()
    assert torch.allclose(one.value, batch.value[3])
    assert set(one.to_dict()) == {"action", "probs", "logp", "entropy", "value"}
    with pytest.raises(ValueError, match="expects"):
        policy.act(torch.zeros(7))


def test_the_action_history_changes_the_decision_inputs(policy: PolicyNetwork) -> None:
    obs = _obs(32, seed=3)
    other = obs.clone()
    other[:, F + A :] = (other[:, F + A :] + 5) % (A + 1)
    lp1, v1 = policy(obs)
    lp2, v2 = policy(other)
    assert not torch.allclose(v1, v2)
    no_hist = PolicyNetwork(PolicyConfig(F, A, 0, hidden_sizes=(16,)))
    assert no_hist(obs[:, : F + A])[0].shape == (32, A)


def test_the_mask_is_also_an_input_feature(policy: PolicyNetwork) -> None:
    obs = _obs(16, seed=4)
    legal = torch.ones(16, A, dtype=torch.bool)
    a = obs.clone()
    a[:, F : F + A] = 1.0
    b = a.clone()
    b[:, F + 5] = 0.0  # one action less in the input, same mask applied to the logits
    assert not torch.allclose(policy(a, legal)[0], policy(b, legal)[0])


def test_exported_program_matches_eager_exactly(policy: PolicyNetwork, tmp_path: Path) -> None:
    path = tmp_path / "policy.pt2"
    export_policy(policy, path)
    served = load_exported(path)
    for n in (1, 257):
        obs = _obs(n, seed=n)
        eager = policy.act(obs, deterministic=True)
        out = served(obs)
        for got, want in zip(out, (eager.action, eager.probs, eager.logp, eager.entropy, eager.value)):
            assert torch.equal(got, want)


def test_save_and_load_roundtrip(policy: PolicyNetwork, tmp_path: Path) -> None:
    saved = save_policy(policy, tmp_path / "p", metadata={"reward_fn_version": "abc"})
    doc = json.loads(saved.config.read_text())
    assert doc["config"]["n_actions"] == A and doc["n_parameters"] == policy.num_parameters()
    loaded = load_policy(tmp_path / "p")
    obs = _obs(8, seed=9)
    assert torch.equal(loaded(obs)[0], policy(obs)[0])
    assert loaded.config == policy.config
    with pytest.raises(FileNotFoundError, match="policy.json"):
        load_policy(tmp_path / "missing")


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="activation"):
        PolicyConfig(3, 2, 1, activation="gelu2")
    with pytest.raises(ValueError, match="n_actions"):
        PolicyConfig(3, 0, 1)
    with pytest.raises(ValueError, match="unknown keys"):
        PolicyConfig.from_dict({"n_features": 3, "n_actions": 2, "history_len": 1, "width": 9})
    cfg = PolicyConfig(3, 2, 1, hidden_sizes=[8, 8])
    assert cfg.hidden_sizes == (8, 8) and PolicyConfig.from_dict(cfg.to_dict()) == cfg


def _normalising_policy() -> PolicyNetwork:
    torch.manual_seed(1)
    net = PolicyNetwork(PolicyConfig(F, A, K, hidden_sizes=(32, 32), embed_dim=8, obs_norm=True))
    # Features in very different units, as a pack's raw ranges can leave them.
    net.update_obs_stats(_obs(512, seed=3) * torch.cat([torch.linspace(0.01, 100, F), torch.ones(A + K)]))
    return net


def test_observation_statistics_are_buffers_of_the_policy() -> None:
    net = _normalising_policy()
    sd = net.state_dict()
    assert {"obs_rms.mean", "obs_rms.var", "obs_rms.count"} <= set(sd)
    assert not any(n.startswith("obs_rms") for n, _ in net.named_parameters())  # not trained by the optimizer
    obs = _obs(8, seed=4)
    z = net.normalized_features(obs)
    assert torch.allclose(z, ((obs[:, :F] - sd["obs_rms.mean"]) / torch.sqrt(sd["obs_rms.var"] + 1e-8)).clamp(-5, 5))
    plain = PolicyNetwork(PolicyConfig(F, A, K, hidden_sizes=(32, 32), embed_dim=8))
    assert plain.obs_rms is None and torch.equal(plain.normalized_features(obs), obs[:, :F])


def test_saved_and_exported_policy_normalise_identically(tmp_path: Path) -> None:
    net = _normalising_policy().eval()
    obs = _obs(64, seed=5)
    eager = net.act(obs, deterministic=True)
    save_policy(net, tmp_path / "p")
    assert json.loads((tmp_path / "p" / "policy.json").read_text())["config"]["obs_norm"] is True
    loaded = load_policy(tmp_path / "p")
    assert torch.equal(loaded.obs_rms.mean, net.obs_rms.mean)
    again = loaded.act(obs, deterministic=True)
    assert torch.equal(again.action, eager.action) and torch.allclose(again.probs, eager.probs)
    export_policy(net, tmp_path / "p.pt2")
    action, probs, *_ = load_exported(tmp_path / "p.pt2")(obs)
    assert torch.equal(action, eager.action) and torch.allclose(probs, eager.probs, atol=1e-6)


def test_a_policy_saved_before_obs_norm_existed_still_loads(policy: PolicyNetwork, tmp_path: Path) -> None:
    save_policy(policy, tmp_path / "old")
    doc = json.loads((tmp_path / "old" / "policy.json").read_text())
    for key in ("obs_norm", "obs_clip"):
        doc["config"].pop(key)
    (tmp_path / "old" / "policy.json").write_text(json.dumps(doc))
    loaded = load_policy(tmp_path / "old")
    assert loaded.obs_rms is None
    obs = _obs(16, seed=6)
    assert torch.equal(loaded.act(obs, deterministic=True).action, policy.act(obs, deterministic=True).action)


# ---------------------------------------------------------------------------- fast CPU kernels: same math
def test_fast_tanh_matches_torch_tanh_in_value_and_gradient() -> None:
    x = torch.linspace(-12, 12, 20_001, dtype=torch.float32)
    assert (fast_tanh(x) - torch.tanh(x)).abs().max() < 2e-7
    xg = x.clone().requires_grad_()
    fast_tanh(xg).sum().backward()
    assert (xg.grad - (1 - torch.tanh(x) ** 2)).abs().max() < 5e-7
    assert fast_tanh(torch.tensor([0.0])).item() == 0.0


def test_probs_of_is_exp_on_legal_actions_and_zero_on_masked_ones() -> None:
    gen = torch.Generator().manual_seed(5)
    mask = torch.rand(300, 7, generator=gen) < 0.5
    mask[:, 2] = True
    logits = torch.randn(300, 7, generator=gen) * 3
    logits[0, 2] = -150.0  # a legal action far below the others: its probability underflows
    mask[0, 3] = True
    logp = masked_log_probs(logits, mask)
    p = probs_of(logp, mask)
    legal = mask.clone()
    legal[0, 2] = False
    assert torch.equal(p[legal], logp.exp()[legal])  # bit for bit where exp does not underflow
    assert torch.equal(p[~mask], torch.zeros_like(p[~mask]))
    assert p[0, 2].item() == pytest.approx(math.exp(-87.0), rel=1e-6)  # floored, not a denormal
    assert torch.allclose(p.sum(-1), torch.ones(300), atol=1e-6)
    # without a mask the masked entries are the floor, which every caller zeroes by the mask
    assert torch.equal(torch.where(mask, probs_of(logp), 0.0), torch.where(mask, p, 0.0))


def test_greedy_and_gumbel_choices_do_not_depend_on_the_memory_layout() -> None:
    gen = torch.Generator().manual_seed(6)
    mask = torch.rand(500, 6, generator=gen) < 0.6
    mask[:, 0] = True
    logp = masked_log_probs(torch.randn(500, 6, generator=gen), mask)  # a transposed view
    assert not logp.is_contiguous()
    assert torch.equal(greedy_actions(logp), logp.contiguous().argmax(-1))
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    u = torch.rand(logp.shape, generator=g1).clamp_(1e-20, 1.0 - 1e-7)
    want = (logp + -torch.log(-torch.log(u))).argmax(-1)
    assert torch.equal(gumbel_sample(logp, g2), want)


def test_softmax_rows_equals_softmax_over_the_last_dimension() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(513, 7, generator=gen) * 4
    assert torch.equal(softmax_rows(x, log=True), torch.log_softmax(x, dim=-1))
    assert (softmax_rows(x) - torch.softmax(x, dim=-1)).abs().max() < 1e-7
    xg = x.clone().requires_grad_()
    (softmax_rows(xg, log=True) * torch.arange(7.0)).sum().backward()
    xr = x.clone().requires_grad_()
    (torch.log_softmax(xr, dim=-1) * torch.arange(7.0)).sum().backward()
    assert torch.allclose(xg.grad, xr.grad, atol=1e-6)


def test_history_codes_are_read_from_the_observation_and_kept_in_range(policy: PolicyNetwork) -> None:
    F_, A, k = policy.n_features, policy.n_actions, policy.history_len
    codes = torch.randint(0, A + 1, (64, k), generator=torch.Generator().manual_seed(0))
    obs = torch.cat([torch.zeros(64, F_ + A), codes.float()], dim=1)
    assert torch.equal(policy.history_codes(obs), codes)
    # a code no encoder writes (a corrupt observation) reads as the nearest valid one, never an index error
    obs[0, F_ + A :] = torch.tensor([-3.0] + [A + 5.0] * (k - 1))
    assert policy.history_codes(obs)[0].tolist() == [0] + [A] * (k - 1)


def _textbook_history_summary(policy: PolicyNetwork, obs: torch.Tensor) -> torch.Tensor:
    """The attention over the last k actions as written down: tokens embed[code] + pos[j], keys and
    values from one linear map, softmax of q·key / sqrt(E), the value-weighted sum."""
    F_, A_, E = policy.n_features, policy.n_actions, policy.embed_dim
    state = torch.cat([policy.normalized_features(obs), obs[:, F_ : F_ + A_]], dim=-1)
    tokens = policy.action_embed(obs[:, F_ + A_ :].long()) + policy.pos_embed  # [N, k, E]
    kv = policy.key_value(tokens)
    keys, values = kv[..., :E], kv[..., E:]
    q = policy.query(state).unsqueeze(1)
    weights = torch.softmax((keys * q).sum(-1) / math.sqrt(E), dim=-1)
    return (weights.unsqueeze(-1) * values).sum(1)


def test_history_summary_is_the_textbook_attention_with_its_gradients() -> None:
    torch.manual_seed(3)
    net = PolicyNetwork(PolicyConfig(F, 6, 5, hidden_sizes=(16, 16), embed_dim=8))
    gen = torch.Generator().manual_seed(4)
    obs = torch.cat(
        [torch.randn(256, F, generator=gen), torch.ones(256, 6), torch.randint(0, 7, (256, 5), generator=gen).float()],
        1,
    )
    params = [net.action_embed.weight, net.pos_embed, net.query.weight, net.key_value.weight, net.key_value.bias]
    got = net._inputs(obs)[:, F + 6 :]
    want = _textbook_history_summary(net, obs)
    assert (got - want).abs().max() < 1e-5
    probe = torch.randn_like(want, generator=gen)
    g_got = torch.autograd.grad((got * probe).sum(), params)
    g_want = torch.autograd.grad((want * probe).sum(), params)
    for a, b in zip(g_got, g_want, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_forward_is_deterministic_and_batch_independent(policy: PolicyNetwork) -> None:
    gen = torch.Generator().manual_seed(5)
    obs = torch.cat(
        [
            torch.randn(32, policy.n_features, generator=gen),
            torch.ones(32, policy.n_actions),
            torch.randint(0, policy.n_actions + 1, (32, policy.history_len), generator=gen).float(),
        ],
        1,
    )
    with torch.no_grad():
        logp_a, v_a = policy(obs)
        logp_b, v_b = policy(obs)
        logp_1, v_1 = policy(obs[:1])
    assert torch.equal(logp_a, logp_b) and torch.equal(v_a, v_b)
    assert torch.allclose(logp_1, logp_a[:1], atol=1e-6) and torch.allclose(v_1, v_a[:1], atol=1e-6)


def _sum_by_code_reference(values: torch.Tensor, codes: torch.Tensor, n_codes: int) -> torch.Tensor:
    return torch.stack([(values * (codes == c)).sum(1) for c in range(n_codes)], dim=1)


def test_sum_by_code_adds_each_rows_values_per_code() -> None:
    gen = torch.Generator().manual_seed(5)
    values, codes = torch.rand(300, 6, generator=gen), torch.randint(0, 4, (300, 6), generator=gen)
    got = sum_by_code(values, codes, 4)
    assert got.shape == (300, 4)
    assert torch.allclose(got, _sum_by_code_reference(values, codes, 4), rtol=1e-6, atol=1e-7)
    assert torch.allclose(got.sum(1), values.sum(1), rtol=1e-6)  # every value lands in exactly one code


@pytest.mark.gpu
def test_sum_by_code_on_an_accelerator_is_the_cpu_sum_and_repeatable() -> None:
    gen = torch.Generator().manual_seed(6)
    values, codes = torch.rand(4096, 8, generator=gen), torch.randint(0, 5, (4096, 8), generator=gen)
    on_gpu = [sum_by_code(values.cuda(), codes.cuda(), 5).cpu() for _ in range(3)]
    assert torch.equal(on_gpu[0], on_gpu[1]) and torch.equal(on_gpu[1], on_gpu[2])
    assert torch.allclose(on_gpu[0], sum_by_code(values, codes, 5), rtol=1e-6, atol=1e-7)

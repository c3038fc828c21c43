"""Replay and audit: observations rebuilt from trace rows equal what the policy saw; the decision
path of a trace (probabilities recomputed with a loadable policy, else from logp; depth); the
per-cluster audit report with its drivers of low scores, written and logged to MLflow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.cli import main as rlops_main
from rlops.common.config import REPO_ROOT, load_params
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import save_policy
from rlops.pipeline_steps.audit.replay import replay
from rlops.pipeline_steps.audit.report import audit, audit_clusters
from rlops.pipeline_steps.infra.context import StepContext
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import random_policy, rule_policy
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store.states import (
    error_flags,
    mask_matrix,
    normalized_entropy,
    observations_from_traces,
)

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)


@pytest.fixture(scope="module")
def policy_dir(credit: Pack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1)
    d = tmp_path_factory.mktemp("policy")
    save_policy(PolicyNetwork(PolicyConfig.from_layout(credit.scenario.layout)), d)
    return d


def network_policy(path: Path, seen: list[torch.Tensor] | None = None):
    from rlops.model.policy_io import load_policy

    net = load_policy(path)
    gen = torch.Generator().manual_seed(0)

    def act(env):
        obs = env.observe()
        if seen is not None:
            seen.append(obs.clone())
        out = net.act(obs, generator=gen)
        return out.action, {"logp": out.logp, "entropy": out.entropy, "value": out.value}

    return act


def test_observations_rebuilt_from_traces_equal_what_the_policy_saw(credit: Pack, policy_dir: Path) -> None:
    seen: list[torch.Tensor] = []
    df = rollout_traces(
        credit, network_policy(policy_dir, seen), 64, seed=100, profile="live", policy_version=str(policy_dir)
    )
    obs, masks = observations_from_traces(credit, df.sample(frac=1.0, random_state=0).sort_index())
    ep = df["episode_id"].str.rsplit("-", n=1).str[1].astype(int).to_numpy() - 100
    expected = torch.stack([seen[k][i] for k, i in zip(df["step"].to_numpy(), ep)])
    assert torch.allclose(obs, expected, atol=1e-5)
    assert torch.equal(masks, torch.from_numpy(mask_matrix(df["action_mask"], credit.scenario.n_actions)))
    norm = normalized_entropy(df["entropy"].to_numpy(), masks.numpy())
    assert ((norm >= 0) & (norm <= 1)).all() and (norm[masks.sum(1).numpy() == 1] == 0).all()


def test_error_flags_read_bools_and_messages() -> None:
    assert error_flags(pd.Series([True, False])).tolist() == [True, False]
    assert error_flags(pd.Series(["TimeoutError: bureau", None, "", "False"])).tolist() == [True, False, False, False]


def _ctx(tmp_path: Path, tracking: str | None = None) -> StepContext:
    over = {"storage": {"root": f"file://{tmp_path / 'storage'}"}, "audit": {"clusters": 4}}
    if tracking:
        over["tracking"] = {"uri": tracking}
    return StepContext.create("credit_approval", "20261130T0500", params=load_params(overrides=over))


def _store(ctx: StepContext, df: pd.DataFrame, name: str) -> None:
    ctx.storage.write_parquet(
        ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=04", f"part-{name}.parquet"), df
    )


def test_replay_recomputes_probabilities_with_the_recorded_policy(
    credit: Pack, policy_dir: Path, tmp_path: Path
) -> None:
    ctx = _ctx(tmp_path)
    df = rollout_traces(credit, network_policy(policy_dir), 20, seed=5, policy_version=str(policy_dir))
    _store(ctx, df, "net")
    _store(ctx, rollout_traces(credit, rule_policy, 20, seed=500), "rules")
    ep = df[df["episode_id"] == df["episode_id"].iloc[0]]
    last = ep.iloc[-1]
    path = replay(ctx, str(last["trace_id"]))
    assert path.episode_id == last["episode_id"] and path.shown_steps == len(ep)
    for step, (_, row) in zip(path.steps, ep.iterrows()):
        assert step.probability_source.startswith("recomputed")
        assert step.probabilities[row["action"]] == pytest.approx(np.exp(row["logp"]), abs=1e-3)
        assert sum(step.probabilities.values()) == pytest.approx(1.0, abs=1e-3)
        assert set(step.probabilities) == set(step.legal)
        assert step.reward_total == pytest.approx(sum(b["score"] for b in step.breakdown), abs=1e-4)
    deep = replay(ctx, str(last["trace_id"]), depth=2)
    assert [s.step for s in deep.steps] == list(ep["step"].iloc[-2:])


def test_replay_falls_back_to_logp_for_the_rule_engine(credit: Pack, tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    df = rollout_traces(credit, rule_policy, 10, seed=1)
    _store(ctx, df, "rules")
    row = df.iloc[1]
    path = replay(ctx, str(row["trace_id"]))
    assert path.steps[-1].step == row["step"]
    assert path.steps[-1].probabilities == {row["action"]: 1.0}
    assert "rule engine" in path.steps[-1].probability_source
    assert "user_profile.age" in path.steps[0].state
    assert "user_profile.credit_score" not in path.steps[0].state  # not visible before the report
    with pytest.raises(ValueError, match="not found"):
        replay(ctx, "no-such-trace")


def test_audit_clusters_name_actions_and_low_score_drivers(credit: Pack) -> None:
    df = pd.concat(
        [
            rollout_traces(credit, rule_policy, 300, seed=0),
            rollout_traces(credit, random_policy(3), 300, seed=1000, policy_version="random"),
        ],
        ignore_index=True,
    )
    clusters = audit_clusters(credit, df, clusters=4, seed=7)
    assert sum(c["states"] for c in clusters) == len(df)
    assert all(c["top_actions"] and c["description"] for c in clusters)
    drivers = [d["component"] for c in clusters for d in c["drivers"]]
    assert drivers and set(drivers) <= {
        "handling_time",
        "human_cost",
        "loan_outcome",
        "lost_business",
        "amount_cap",
        "repeat_penalty",
        "clip",
    }
    top = clusters[0]["top_actions"][0]
    assert {"mean_reward", "std_reward", "mean_return_to_go", "std_return_to_go"} <= set(top)


def test_audit_step_writes_html_and_logs(
    credit: Pack, tmp_path: Path, tmp_tracking: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = _ctx(tmp_path, tmp_tracking)
    _store(
        ctx,
        rollout_traces(
            credit,
            random_policy(0),
            200,
            seed=0,
            policy_version="9",
            start_ts=pd.Timestamp("2026-11-30T04:10:00Z").to_pydatetime(),
        ),
        "a",
    )
    out = audit(ctx, policy_version="9")
    page = ctx.storage.read_text(out.html_uri)
    assert "<img" in page and "data:image/png;base64," in page and "<table>" in page
    body = ctx.storage.read_json(out.report_uri)
    assert body["meta"]["policy_version"] == "9" and len(body["clusters"]) == out.clusters <= 4
    with pytest.raises(ValueError, match="no trace rows"):
        audit(ctx, policy_version="nope")
    from rlops.registry.client import Tracker

    tr = Tracker(tmp_tracking, "credit_approval")
    assert out.run_id is not None and tr.client.list_artifacts(out.run_id, "audit")
    assert body["meta"]["traces_uri"].endswith("scenario=credit_approval")


def test_replay_cli_prints_the_path(
    credit: Pack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp_path / 'storage'}")
    ctx = _ctx(tmp_path)
    df = rollout_traces(credit, rule_policy, 5, seed=2)
    _store(ctx, df, "x")
    assert rlops_main(["replay", "--trace-id", str(df["trace_id"].iloc[2])]) == 0
    text = capsys.readouterr().out
    assert "probabilities:" in text and "legal:" in text and "handling_time" in text

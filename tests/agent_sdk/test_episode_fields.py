"""Episode fields an integration relies on: the caller's episode id, the reward provider told which
step it scores and its score kept as the hook's component, and the rule engine's propensity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlops.agent_sdk import Episode, EpisodeRef, Tracer, rollout


def rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(folder.rglob("*.jsonl")) for line in f.read_text().splitlines()]


class Csat:
    component = "csat"

    def __init__(self) -> None:
        self.seen: list[EpisodeRef] = []

    def reward(self, state: Any, action: str, next_state: Any, episode: EpisodeRef | None = None) -> float:
        assert episode is not None
        self.seen.append(episode)
        return 0.5 if action == "approve" else -0.1


def test_the_callers_episode_id_and_the_provider_told_the_step(tmp_path: Path) -> None:
    csat = Csat()
    with (
        Tracer(tmp_path) as tracer,
        Episode(
            tracer, scenario="s", policy_version="p/1", trace_id="t-9", episode_id="app-42", reward_provider=csat
        ) as ep,
    ):
        ep.step({"a": 1}, "check")
        ep.step({"a": 2}, "approve", done=True)
    recs = rows(tmp_path)
    assert [r["episode_id"] for r in recs] == ["app-42", "app-42"]
    assert csat.seen == [EpisodeRef("t-9", "app-42", 0, "s"), EpisodeRef("t-9", "app-42", 1, "s")]
    assert all("reward_total" not in r for r in recs)  # never the pack's reward column
    assert [r["reward_breakdown"] for r in recs] == [
        [{"component": "hook:csat", "score": -0.1, "reason": "external score csat"}],
        [{"component": "hook:csat", "score": 0.5, "reason": "external score csat"}],
    ]


def test_rollout_takes_the_episode_id_from_the_call(tmp_path: Path) -> None:
    with Tracer(tmp_path) as tracer:

        @rollout(tracer, scenario="s", policy_version="p/1", episode_id=lambda app, **_: f"ep-{app}")
        def run(app: str, episode: Episode) -> None:
            episode.step({"a": 1}, "x", done=True)

        run("7")
    assert rows(tmp_path)[0]["episode_id"] == "ep-7"


def test_a_pack_reward_and_the_hook_score_side_by_side(tmp_path: Path) -> None:
    with Tracer(tmp_path) as tracer, Episode(tracer, scenario="s", policy_version="p/1", reward_provider=Csat()) as ep:
        ep.step({"a": 1}, "approve", reward_total=1.0, reward_breakdown=[{"component": "profit", "score": 1.0}])
    (rec,) = rows(tmp_path)
    assert rec["reward_total"] == 1.0
    assert [c["component"] for c in rec["reward_breakdown"]] == ["profit", "hook:csat"]


def test_rule_engine_steps_carry_propensity_one(tmp_path: Path) -> None:
    with Tracer(tmp_path) as tracer:
        with Episode(tracer, scenario="s", policy_version="rules") as ep:
            ep.step({"a": 1}, "x")
            ep.step({"a": 1}, "y", logp=-0.7)  # an explicit propensity stands
        with Episode(tracer, scenario="s", policy_version="p/1") as ep:
            ep.step({"a": 1}, "x")
            ep.annotate(policy_version="rules")  # a fallback known only after the step ran
    recs = rows(tmp_path)
    assert [r.get("logp") for r in recs] == [0.0, -0.7, 0.0]


def test_an_empty_episode_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="episode_id"):
        Episode(Tracer(tmp_path), scenario="s", policy_version="p", episode_id=" ")

"""The events file of the simulated timeline: validated with clear errors, and applied to the
production stand-in only (the pack's own scenario is never edited)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.timeline.events import (
    DEFAULT_EVENTS_48H,
    in_force,
    load_events,
    parse_events,
    production_doc,
    scaled_events,
)


def test_the_standard_events_parse_and_scale() -> None:
    events = parse_events(DEFAULT_EVENTS_48H)
    assert [e.kind for e in events] == ["population", "latency", "outcome", "error_rate", "reward_fn", "bad_candidate"]
    assert [e.at_hour for e in scaled_events(12)] == [2.5, 5.0, 6.0, 7.5, 8.5, 10.0]
    assert [e.kind for e in in_force(events, 25)] == ["population", "latency", "outcome"]
    assert [e.kind for e in events if e.outcome] == ["outcome", "reward_fn"]


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"events": [{"at_hour": 1, "kind": "meteor"}]}, "kind 'meteor' unknown"),
        ({"events": [{"at_hour": -1, "kind": "bad_candidate"}]}, "at_hour -1"),
        ({"events": [{"at_hour": 1, "kind": "latency", "action": "approve"}]}, "takes \\['action', 'factor'\\]"),
        ({"events": [{"at_hour": 1, "kind": "error_rate", "api": "sms", "rate": 2}]}, "probability"),
        ({"events": "soon"}, "expected a list"),
        ({"events": [{"at_hour": 1, "kind": "outcome", "field": "hidden.default_prob"}]}, "either factor"),
        (
            {"events": [{"at_hour": 1, "kind": "outcome", "field": "hidden.default_prob", "factor": 2, "expr": "0.1"}]},
            "either factor",
        ),
        ({"events": [{"at_hour": 1, "kind": "outcome", "field": "hidden.default_prob", "factor": -1}]}, ">= 0"),
        ({"events": [{"at_hour": 1, "kind": "reward_fn", "version": ""}]}, "reward function label"),
        ({"events": [{"at_hour": 1, "kind": "reward_fn", "version": "v2", "when": "x"}]}, "takes \\['version'\\]"),
    ],
)
def test_bad_events_are_clear_errors(doc: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_events(doc)


def test_events_edit_only_the_production_world(tmp_path: Path) -> None:
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(DEFAULT_EVENTS_48H))
    events = load_events(path)
    doc = yaml.safe_load((REPO_ROOT / "scenarios" / "credit_approval" / "scenario.yaml").read_text())
    before = yaml.safe_dump(doc)
    prod = production_doc(doc, events)
    assert yaml.safe_dump(doc) == before  # the pack's document is untouched
    assert prod["state"]["user_profile"]["age"]["init"]["mean"] == 58
    fetch = next(a for a in prod["actions"] if a["name"] == "fetch_credit_report")
    assert fetch["latency_ms"]["mean"] == 1500
    assert prod["simulation"]["profiles"]["live"]["error_rates"]["credit_bureau"] == 0.25
    assert all("user_profile.age" not in s["init"] for s in prod["simulation"]["profiles"]["live"]["population"])
    with pytest.raises(UserError, match="no action 'teleport'"):
        production_doc(doc, parse_events([{"at_hour": 0, "kind": "latency", "action": "teleport", "factor": 2}]))
    with pytest.raises(UserError, match="not found"):
        load_events(tmp_path / "missing.yaml")


def _credit_doc() -> dict:
    return yaml.safe_load((REPO_ROOT / "scenarios" / "credit_approval" / "scenario.yaml").read_text())


def test_an_outcome_event_rewrites_every_expression_of_the_hidden_field(tmp_path: Path) -> None:
    import shutil

    import torch

    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import evaluate_policy, rule_policy

    doc = _credit_doc()
    event = parse_events(
        [
            {
                "at_hour": 0,
                "kind": "outcome",
                "field": "hidden.default_prob",
                "factor": 2.5,
                "when": "user_profile.age >= 60",
            }
        ]
    )
    prod = production_doc(doc, event)
    assert doc == _credit_doc()  # the pack's document is untouched
    init = prod["state"]["hidden"]["default_prob"]["init"]["expr"]
    assert init.startswith("min(1.0, (sigmoid(") and init.endswith("* (1 + 1.5 * (user_profile.age >= 60)))")
    setters = [
        eff["set"]["hidden.default_prob"]
        for a in prod["actions"]
        for eff in a.get("effects") or []
        if "hidden.default_prob" in eff.get("set", {})
    ]
    assert len(setters) == 2 and all("user_profile.age >= 60" in s for s in setters)
    # The rewritten world compiles, and older applicants now default 2.5 times as often.
    worlds = {}
    for name, d in (("pack", doc), ("prod", prod)):
        folder = tmp_path / name
        shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", folder)
        (folder / "scenario.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
        worlds[name] = load_pack(folder, check_liveness=False)
    probs = {}
    for name, pack in worlds.items():
        env = pack.make_env(4000, illegal_action="noop")
        env.reset(7)
        age = env.S[:, pack.scenario.columns["user_profile.age"]]
        # (the age is drawn as a real number and stored rounded: leave out the year at the boundary)
        old, young = age >= 61, age < 59
        p = env.S[:, pack.scenario.columns["hidden.default_prob"]]
        probs[name] = (old, young, p.clone())
        evaluate_policy(pack, rule_policy, episodes=200, seed=3, profile="live")
    old, young, before = probs["pack"]
    after = probs["prod"][2]
    assert bool(old.any()) and bool(young.any())
    assert torch.allclose(after[young], before[young])  # the younger: unchanged
    assert torch.allclose(after[old], torch.clamp(before[old] * 2.5, max=1.0), atol=1e-6)  # × 2.5, at most 1
    with pytest.raises(UserError, match="no state field"):
        production_doc(doc, parse_events([{"at_hour": 0, "kind": "outcome", "field": "hidden.nope", "factor": 2}]))
    with pytest.raises(UserError, match="no expression to change"):
        production_doc(doc, parse_events([{"at_hour": 0, "kind": "outcome", "field": "user_profile.age", "factor": 2}]))


def test_a_rule_change_moves_the_production_reward_fn(tmp_path: Path) -> None:
    from rlops.sandbox.pack import load_pack
    from rlops.timeline.events import reward_fn_in_force, reward_modules
    from rlops.timeline.world import ProductionWorld

    events = parse_events(DEFAULT_EVENTS_48H)
    assert reward_fn_in_force(in_force(events, 33.9), "v1") == "v1"
    assert reward_fn_in_force(in_force(events, 34), "v1") == "v2"
    assert reward_modules(in_force(events, 34)) == {"reward_v2.py": "changes/reward_v2.py"}
    # the business's new reward function reaches the production world only, not the pack
    pack_dir = REPO_ROOT / "scenarios" / "credit_approval"
    assert "v2" not in load_pack(pack_dir).reward_fns
    world = ProductionWorld(pack_dir, tmp_path)
    assert "v2" not in world.pack(in_force(events, 33), events).reward_fns
    prod = world.pack(in_force(events, 34), events)
    assert prod.reward_fn("v2").label == "v2" and "v1" in prod.reward_fns
    with pytest.raises(UserError, match="not a .py file"):
        parse_events([{"at_hour": 0, "kind": "reward_fn", "version": "v2", "module": "x.txt"}])

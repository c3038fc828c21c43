"""The events file of the simulated timeline: validated with clear errors, and applied to the
production stand-in only (the pack's own scenario is never edited)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.pipeline_steps.orchestration.events import (DEFAULT_EVENTS_48H, in_force, load_events, parse_events,
                                                 production_doc, scaled_events)


def test_the_standard_events_parse_and_scale() -> None:
    events = parse_events(DEFAULT_EVENTS_48H)
    assert [e.kind for e in events] == ["population", "latency", "error_rate", "bad_candidate"]
    assert [e.at_hour for e in scaled_events(12)] == [2.5, 5.0, 7.5, 10.0]
    assert [e.kind for e in in_force(events, 25)] == ["population", "latency"]


@pytest.mark.parametrize("doc, message", [
    ({"events": [{"at_hour": 1, "kind": "meteor"}]}, "kind 'meteor' unknown"),
    ({"events": [{"at_hour": -1, "kind": "bad_candidate"}]}, "at_hour -1"),
    ({"events": [{"at_hour": 1, "kind": "latency", "action": "approve"}]}, "takes \\['action', 'factor'\\]"),
    ({"events": [{"at_hour": 1, "kind": "error_rate", "api": "sms", "rate": 2}]}, "probability"),
    ({"events": "soon"}, "expected a list"),
])
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

"""The business signal store: offers accepted or refused and kept, the value in force, the commands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlops.common.errors import UserError
from rlops.common.params_model import SignalsParams
from rlops.pipeline_steps.infra.signal_store import Declaration, SignalStore, lineage, set_signal, show_signals
from rlops.sandbox.reward_signals import SignalWeight
from rlops.storage.backend import Storage

DECL = [Declaration("credit_approval", "v1", SignalWeight("compliance", "complaint_index", 0.0, 1.0, 1.0, 1.77, 0.0))]


@pytest.fixture()
def store(tmp_path: Path) -> SignalStore:
    return SignalStore(Storage(f"file://{tmp_path}"), SignalsParams())


def test_never_set_is_the_baseline(store: SignalStore) -> None:
    r = store.reading("complaint_index", DECL)
    assert (r.value, r.status, r.set_at, r.note) == (0.0, "baseline", None, "")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("nan", "not a finite number"),
        ("1.5", "outside the declared range [0, 1]"),
        ("", "missing"),
        ("high", "not a number"),
    ],
)
def test_a_bad_value_keeps_the_last_good_one_and_says_so(store: SignalStore, raw: str, reason: str) -> None:
    ok, r = store.offer("complaint_index", "0.4", DECL, by="test")
    assert ok.accepted and (r.value, r.status) == (0.4, "set")
    bad, r = store.offer("complaint_index", raw, DECL, by="test")
    assert not bad.accepted and reason in str(bad.reason)
    assert (r.value, r.status) == (0.4, "last_good") and reason in r.note and "kept 0.4" in r.note
    # both offers are kept, the refusal with its reason
    assert [(h.raw, h.accepted) for h in store.history("complaint_index")] == [("0.4", True), (raw, False)]
    assert lineage([r])["signal.complaint_index"] == "0.4"
    assert lineage([r])["signal.complaint_index.status"].startswith("last_good: value")


def test_a_bad_first_value_stays_at_the_baseline(store: SignalStore) -> None:
    _, r = store.offer("complaint_index", math.inf, DECL, by="test")
    assert (r.value, r.status) == (0.0, "baseline") and "not a finite number" in r.note


def test_dry_run_records_nothing(store: SignalStore) -> None:
    store.offer("complaint_index", "0.3", DECL, by="test", dry_run=True)
    assert store.history("complaint_index") == []


def test_set_and_show_check_every_declaring_pack(tmp_path: Path) -> None:
    params = {"storage": {"root": f"file://{tmp_path}"}}
    out = set_signal(params, "complaint_index", "0.25")
    assert out.in_force.value == 0.25 and out.offer.accepted
    with pytest.raises(UserError) as err:
        set_signal(params, "complaint_index", "-1")
    msg = str(err.value)
    assert "\n" not in msg and "outside the declared range [0, 1]" in msg and "0.25 stays in force" in msg
    with pytest.raises(UserError, match="no reward module"):
        set_signal(params, "unknown_signal", "1")
    shown = show_signals(params).signals
    assert [s.reading.name for s in shown] == ["complaint_index"]
    s = shown[0]
    assert (s.reading.value, s.reading.status) == (0.25, "last_good")
    assert s.declared_by[0].weight_in_force == pytest.approx(1.0 + 0.25 * 0.77)
    assert [h.accepted for h in s.history] == [True, False]
    assert list(s.as_dict()) == ["name", "value", "status", "set_at", "note", "declared_by", "history"]
    doc = json.loads((tmp_path / "signals" / "complaint_index.json").read_text())
    assert doc["history"][-1]["reason"].startswith("-1.0 is outside")


def test_the_command_refuses_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from rlops.cli import main

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp_path}")
    assert main(["signal", "set", "complaint_index", "0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["in_force"]["value"] == 0.5
    assert main(["signal", "set", "complaint_index", "NaN"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a finite number" in err[0] and "0.5 stays in force" in err[0]
    assert main(["signal", "show", "complaint_index"]) == 0
    assert "complaint_index = 0.5 (last_good" in capsys.readouterr().out

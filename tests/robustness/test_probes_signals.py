"""Signal probes: ``rlops signal set NAME VALUE`` moves the reward weights of every pack that
declares the signal, so a value an operator mistypes or a script garbles — text, NaN, infinity,
out of the declared range, 10,000 digits, a name that is no signal — must be refused with one
line naming the signal and the value (exit 2), the value in force unchanged and the refusal
recorded in the history; a good value is in force at once. Over the repository's packs
(credit_approval's reward v1 declares ``complaint_index`` in [0, 1]). One test per probe."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, run_probe

SIGNAL = "complaint_index"
BEFORE = "0.5"


def shown() -> dict[str, Any]:
    rc, out, err = cli(["signal", "show", SIGNAL, "--json", "--last", "100"])
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)["signals"][0]
    return doc


def refused(value: str, *mentions: str, name: str = SIGNAL) -> Callable[[Path], Verdict]:
    """``value`` (for ``name``) is refused in one line; ``BEFORE`` stays in force; a refusal of a
    declared signal is recorded in its history."""

    def run(tmp: Path) -> Verdict:
        rc, _, err = cli(["signal", "set", SIGNAL, BEFORE])
        if rc != 0:
            return "accepted", f"the control value {BEFORE} was refused: {err.strip()}"
        history = len(shown()["history"])
        verdict = expect_cli_error(["signal", "set", "--", name, value], 2, mentions)  # "--": a value may be -inf
        if verdict:
            return verdict
        after = shown()
        if after["value"] != float(BEFORE):
            return "lost", f"a refused value changed the signal in force to {after['value']}"
        if name == SIGNAL and not (len(after["history"]) == history + 1 and after["history"][-1]["accepted"] is False):
            return "lost", "the refusal is not in the history"
        return None

    return run


def accepted(value: str, expected: float) -> Callable[[Path], Verdict]:
    def run(tmp: Path) -> Verdict:
        rc, _, err = cli(["signal", "set", SIGNAL, value])
        if rc != 0:
            return "accepted", f"a good value {value!r} was refused: {err.strip()}"
        got = shown()["value"]
        return None if got == expected else ("lost", f"{value!r} is in force as {got}")

    return run


def dry_run_records_nothing(tmp: Path) -> Verdict:
    cli(["signal", "set", SIGNAL, BEFORE])
    history = len(shown()["history"])
    rc, _, err = cli(["signal", "set", SIGNAL, "0.9", "--dry-run"])
    after = shown()
    if rc != 0 or after["value"] != float(BEFORE) or len(after["history"]) != history:
        return "lost", f"a dry run changed the signal (exit {rc}, value {after['value']}): {err.strip()}"
    return None


VALUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "text": ("abc", ("not a number",)),
    "empty": ("", ("no value",)),
    "nan": ("nan", ("finite",)),
    "nan-upper": ("NaN", ("finite",)),
    "infinity": ("inf", ("finite",)),
    "minus-infinity": ("-inf", ("finite",)),
    "overflow": ("1e309", ("finite",)),
    "above-range": ("5", ("5",)),
    "below-range": ("-1", ("-1",)),
    "just-above-range": ("1.0000001", ("1.0000001",)),
    "hex": ("0x1", ("not a number",)),
    "percent": ("50%", ("not a number",)),
    "comma-decimal": ("0,5", ("not a number",)),
    "ten-thousand-digits": ("9" * 10_000, ()),
    "sql": ("0.5; DROP TABLE signals", ("not a number",)),
    "json": ('{"value": 0.5}', ("not a number",)),
}

NAMES: dict[str, str] = {
    "unknown": "no_such_signal",
    "path": "../complaint_index",
    "quote": "complaint_index'--",
    "long": "s" * 10_000,
    "empty-name": "",
}

PROBES = [
    *(IOProbe(f"signal-value-{k}", refused(v, SIGNAL, "refused", *m)) for k, (v, m) in VALUES.items()),
    *(IOProbe(f"signal-name-{k}", refused("0.5", "signal", name=n)) for k, n in NAMES.items()),
    IOProbe("signal-value-in-range", accepted("0.25", 0.25)),
    IOProbe("signal-value-padded", accepted(" 0.75 ", 0.75)),
    IOProbe("signal-value-range-end", accepted("1", 1.0)),
    IOProbe("signal-dry-run-records-nothing", dry_run_records_nothing),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_signal_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

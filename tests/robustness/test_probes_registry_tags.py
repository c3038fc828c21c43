"""Registry probes of the policy client: what the MLflow registry holds is read by every agent, and
anyone with registry access can write it. A hostile ``traffic_fraction`` tag (text, 5, −1, NaN,
infinity), a version whose artifact is missing or corrupt, a registry that does not answer: the
agent keeps serving what it has, never serves a challenger a share nobody set, and says why in
``load_errors``. The serving state is built by the client's own ``build_serving_state`` over a
registry stand-in (no MLflow server: the faults are the registry's answers). One test per probe."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlops.agent_sdk.serving import CHALLENGER, CHALLENGER_RECORD_TAG, CHAMPION, TRAFFIC_TAG, ServingState

from .io_harness import IOProbe, Verdict, check, run_probe

NAME = "credit_approval-policy"


class Registry:
    """The registry as the client's source sees it: champion v1, challenger v2 staged by rlops with
    ``tags``; ``fail`` makes one call raise what a broken registry raises."""

    model_name = NAME

    def __init__(self, tags: dict[str, str], fail: dict[str, Exception] | None = None, record: str = "2") -> None:
        self.tags, self.fail, self.record = tags, fail or {}, record

    def resolve(self, ref: Any) -> tuple[str, dict[str, str]] | None:
        if "resolve" in self.fail:
            raise self.fail["resolve"]
        return ("1", {}) if ref.alias == CHAMPION else ("2", dict(self.tags))

    def load(self, version: str) -> Any:
        if f"load:{version}" in self.fail:
            raise self.fail[f"load:{version}"]
        return f"model v{version}"

    def model_tags(self) -> dict[str, str]:
        if "model_tags" in self.fail:
            raise self.fail["model_tags"]
        return {CHALLENGER_RECORD_TAG: self.record}

    def canonical(self, version: str) -> str:
        return f"{NAME}/{version}"


def serving(registry: Registry, old: ServingState | None = None) -> ServingState:
    from rlops.agent_sdk.registry_source import build_serving_state

    return build_serving_state(registry, "credit_approval", old or ServingState(), None, None, 0.0)


def share(raw: str, expected: float | None) -> Callable[[Path], Verdict]:
    """A challenger tagged ``traffic_fraction: raw``: served ``expected`` of the traffic; a share that
    is no fraction (``expected`` None) serves it none and ``load_errors`` names the tag."""

    def run(tmp: Path) -> Verdict:
        state = serving(Registry({TRAFFIC_TAG: raw}))
        got = state.challenger_fraction
        if not (isinstance(got, float) and math.isfinite(got) and 0.0 <= got <= 1.0):
            return "accepted", f"traffic_fraction {raw!r} became a share of {got!r}"
        if state.champion is None or state.champion.version != "1":
            return "lost", "the champion is no longer served"
        if expected is not None:
            return None if got == expected else ("accepted", f"{raw!r} served {got}, expected {expected}")
        if got != 0.0:
            return "accepted", f"traffic_fraction {raw!r} (no fraction) served the challenger {got:.0%}"
        said = dict(state.load_errors).get(CHALLENGER, "")
        return None if TRAFFIC_TAG in said else ("accepted", f"nothing says why: load_errors {state.load_errors}")

    return run


def fault(fail: dict[str, Exception], group: str) -> Callable[[Path], Verdict]:
    """One registry fault after a good state: the agent keeps serving what it served, the challenger
    gets no unchecked share, and ``load_errors`` names the failing policy with the cause."""

    def run(tmp: Path) -> Verdict:
        good = serving(Registry({TRAFFIC_TAG: "0.25"}))
        if good.challenger_fraction != 0.25:
            return "accepted", f"the control state serves {good.challenger_fraction}"
        state = serving(Registry({TRAFFIC_TAG: "0.25"}, fail), good)
        if state.champion is None or state.champion.model != "model v1":
            return "lost", f"the champion is gone after {list(fail)}"
        said = dict(state.load_errors).get(group, "")
        if not said:
            return "accepted", f"load_errors does not say why: {state.load_errors}"
        if "model_tags" in fail and state.challenger_fraction != 0.0:
            return "accepted", "the challenger kept its share with rlops' record unreadable"
        return None

    return run


def unstaged(record: str) -> Callable[[Path], Verdict]:
    """A challenger rlops did not stage (its record names another version, or none) serves nothing."""

    def run(tmp: Path) -> Verdict:
        state = serving(Registry({TRAFFIC_TAG: "0.5"}, record=record))
        return None if state.challenger_fraction == 0.0 else ("security", "a hand-set challenger got traffic")

    return run


def corrupt_artifact(tmp: Path) -> Verdict:
    """A registered version whose artifact folder holds garbage: loading it is an error the client
    records (through the real loader), never a crash of the refresh."""
    from rlops.agent_sdk.numpy_policy import NumpyPolicy

    (tmp / "policy").mkdir()
    (tmp / "policy" / "MLmodel").write_text("{{{ not yaml")
    (tmp / "policy" / "weights.npz").write_bytes(b"\x00garbage")

    class Corrupt(Registry):
        def load(self, version: str) -> Any:
            return NumpyPolicy.load_pyfunc(str(tmp / "policy")) if version == "2" else super().load(version)

    good = serving(Registry({TRAFFIC_TAG: "0.25"}))
    state = serving(Corrupt({TRAFFIC_TAG: "0.25"}), good)
    said = dict(state.load_errors).get(CHALLENGER, "")
    if state.champion is None or not said:
        return "accepted", f"champion {state.champion}, load_errors {state.load_errors}"
    return None


SHARES: dict[str, tuple[str, float | None]] = {
    "quarter": ("0.25", 0.25),
    "zero": ("0", 0.0),
    "one": ("1", 1.0),
    "one-point-zero": ("1.0", 1.0),
    "padded": (" 0.5 ", 0.5),
    "text": ("abc", None),
    "five": ("5", None),
    "five-percent-sign": ("5%", None),
    "minus-one": ("-1", None),
    "tiny-negative": ("-1e-9", None),
    "nan": ("NaN", None),
    "nan-lower": ("nan", None),
    "infinity": ("inf", None),
    "minus-infinity": ("-inf", None),
    "overflow": ("1e309", None),
    "empty": ("", None),
    "hex": ("0x1", None),
    "fraction-text": ("1/2", None),
    "bool-text": ("True", None),
    "sql": ("0.5; DROP TABLE registered_models", None),
    "ten-thousand": ("9" * 10_000, None),
    "just-over-one": ("1.0000001", None),
}

FAULTS: dict[str, tuple[dict[str, Exception], str]] = {
    "registry-unreachable": ({"resolve": ConnectionError("Connection refused: 127.0.0.1:5000")}, CHAMPION),
    "registry-timeout": ({"resolve": TimeoutError("read timed out")}, CHAMPION),
    "registry-500": ({"resolve": RuntimeError("API request failed with error code 500")}, CHAMPION),
    "artifact-missing": ({"load:2": FileNotFoundError("policy/MLmodel")}, CHALLENGER),
    "champion-artifact-missing": ({"load:1": FileNotFoundError("policy/MLmodel")}, CHAMPION),
    "wrong-layout": ({"load:2": ValueError("expects another observation layout")}, CHALLENGER),
    "record-unreadable": ({"model_tags": ConnectionError("Connection reset")}, CHALLENGER),
}

PROBES = [
    *(IOProbe(f"registry-share-{k}", share(raw, want)) for k, (raw, want) in SHARES.items()),
    *(IOProbe(f"registry-fault-{k}", fault(f, g)) for k, (f, g) in FAULTS.items()),
    IOProbe("registry-unstaged-other-version", unstaged("7")),
    IOProbe("registry-unstaged-no-record", unstaged("")),
    IOProbe("registry-corrupt-artifact", corrupt_artifact),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_registry_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))

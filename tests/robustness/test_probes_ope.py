"""OPE probes: the off-policy gate judges a candidate on logged live traffic, whose propensities and
rewards an agent writes. One hostile value in the log (a propensity of 0, 1e-12, NaN, above 1, text
or missing; a reward of 1e30, 1e200, infinity or NaN) must end in the gate skipped with a reason
naming what is wrong, or in a decision computed on finite numbers — never a pass on an estimate or
interval that is not a number. The candidate is the logging policy itself (every importance weight
1), so the correct decision on clean traffic is known: a pass whose DR equals the logged return.
One test per probe."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from .io_harness import IOProbe, Verdict, check, run_probe

EPISODES = 60


@functools.lru_cache(maxsize=1)
def logged() -> tuple[Any, pd.DataFrame]:
    """The pack and live episodes of a uniformly random logging policy, with its true propensities."""
    from rlops.common.config import REPO_ROOT
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    df = rollout_traces(pack, random_policy(7), EPISODES, seed=7)
    legal = df["action_mask"].astype(str).str.count("1").clip(lower=1)
    df["logp"] = -np.log(legal.to_numpy(dtype=np.float64))
    df["propensity"] = 1.0 / legal.to_numpy(dtype=np.float64)
    df["source"] = "live"
    return pack, df


def uniform(obs: Any, mask: Any) -> np.ndarray:
    """The logging policy as the target: uniform over the legal actions."""
    m = mask.numpy().astype(np.float64)
    return m / m.sum(axis=1, keepdims=True)


def gate(frame: pd.DataFrame) -> tuple[Any, Any]:
    from rlops.common.params_operations import OpeParams
    from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row
    from rlops.pipeline_steps.promotion.ope_value import off_policy_value

    pack, _ = logged()
    # 60 episodes show nothing within a tenth of the logged value; the probes are about hostile
    # values, not the interval's width: a margin wider than any interval lets clean traffic decide
    cfg = OpeParams(min_episodes=20, min_ess=10, direct_method="none", tolerance=1e9)
    res = off_policy_value(pack, frame, uniform, cfg)
    return res, ope_gate_row(res, cfg)


def finite_decision(res: Any, row: Any, truthful: bool = True) -> Verdict:
    """A decided gate: every estimate and bound finite. With the logger as target and its true
    propensities (``truthful``) DR equals the logged return and the gate passes; propensities that
    lie may end in a fail (a rejection), never in a pass that DR does not support."""
    numbers = [res.logged_return, *(x for e in res.estimates.values() for x in (e.value, e.low, e.high))]
    if not all(math.isfinite(x) for x in numbers):
        state = "passed" if row.passed else "failed"
        return "accepted", f"the gate {state} on numbers that are not finite: {row.detail[:200]}"
    if not truthful and not row.passed:
        return None
    dr = res.estimates["dr"].value
    if not math.isclose(dr, res.logged_return, rel_tol=1e-6, abs_tol=1e-9):
        return "accepted", f"DR {dr} of the logging policy is not its logged return {res.logged_return}"
    return None if row.passed else ("accepted", f"the logging policy failed its own gate: {row.detail[:200]}")


def hostile(column: str, value: Any, where: str = "one", expect: str | None = None) -> Callable[[Path], Verdict]:
    """``column`` of one row (``where``: ``one``), of every row (``all``) or the column dropped
    (``drop``) set to ``value``: skipped naming ``expect`` when given, else skipped with any reason or
    a finite decision."""

    def run(tmp: Path) -> Verdict:
        _, df = logged()
        frame = df.copy()
        if where == "drop":
            frame = frame.drop(columns=[c for c in column.split(",")])
        else:
            frame[column] = frame[column].astype(object)
            if where == "one":
                frame.loc[frame.index[len(frame) // 2], column] = value
            else:
                frame[column] = value
        res, row = gate(frame)
        if row.skipped:
            reason = row.detail
            if expect and expect not in reason:
                return "accepted", f"skipped, but the reason does not name {expect!r}: {reason[:200]}"
            return None if reason.startswith("skipped: ") and len(reason) > 12 else ("accepted", "no reason")
        if expect:
            return "accepted", f"{column}={value!r} decided the gate ({row.status}): {row.detail[:200]}"
        return finite_decision(res, row, truthful=column != "propensity" or where == "drop")

    return run


def clean(tmp: Path) -> Verdict:
    """Control: clean traffic decides, and the logging policy passes its own gate."""
    res, row = gate(logged()[1])
    return ("accepted", f"clean traffic was skipped: {row.detail}") if row.skipped else finite_decision(res, row)


PROPENSITY = "usable propensity"

PROBES = [
    IOProbe("ope-clean-control", clean),
    # ---- propensities: the logging policy's probability of the action it took
    IOProbe("ope-propensity-zero", hostile("propensity", 0.0, expect=PROPENSITY)),
    IOProbe("ope-propensity-negative", hostile("propensity", -0.5, expect=PROPENSITY)),
    IOProbe("ope-propensity-above-one", hostile("propensity", 1.5, expect=PROPENSITY)),
    IOProbe("ope-propensity-huge", hostile("propensity", 1e30, expect=PROPENSITY)),
    IOProbe("ope-propensity-tiny", hostile("propensity", 1e-12)),
    IOProbe("ope-propensity-subnormal", hostile("propensity", 5e-324)),
    IOProbe("ope-propensity-text", hostile("propensity", "high", expect=None)),
    IOProbe(
        "ope-propensity-every-row-tiny", hostile("propensity", 1e-12, where="all", expect="mean importance weight")
    ),
    IOProbe("ope-propensity-every-row-zero", hostile("propensity", 0.0, where="all", expect=PROPENSITY)),
    IOProbe("ope-propensity-and-logp-nan", hostile("propensity,logp", None, where="drop", expect=PROPENSITY)),
    IOProbe("ope-logp-positive", hostile("logp", 3.0)),  # propensity still recorded: it wins
    # a NaN or missing propensity falls back to the row's logp (its own record of the same
    # probability): decided on finite numbers; both unusable is a skip
    IOProbe("ope-propensity-nan", hostile("propensity", float("nan"))),
    IOProbe("ope-propensity-infinite", hostile("propensity", float("inf"))),
    IOProbe("ope-propensity-missing-column", hostile("propensity", None, where="drop")),
    # ---- rewards
    IOProbe("ope-reward-1e30", hostile("reward_total", 1e30)),
    IOProbe("ope-reward-minus-1e30", hostile("reward_total", -1e30)),
    IOProbe("ope-reward-1e200", hostile("reward_total", 1e200)),
    IOProbe("ope-reward-max-float", hostile("reward_total", 1.7976931348623157e308)),
    IOProbe("ope-reward-infinite", hostile("reward_total", float("inf"), expect="reward")),
    IOProbe("ope-reward-nan", hostile("reward_total", float("nan"), expect="reward")),
    IOProbe("ope-reward-text", hostile("reward_total", "lots", expect="reward")),
    IOProbe("ope-reward-every-row-1e30", hostile("reward_total", 1e30, where="all")),
    # ---- episodes: a log whose episodes are cut or duplicated
    IOProbe("ope-done-never", hostile("done", False, where="all", expect="complete live episodes")),
    IOProbe("ope-source-not-live", hostile("source", "sandbox", where="all", expect="complete live episodes")),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_ope_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))

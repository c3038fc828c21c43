"""Regret on the timeline: the references and the rule engine are scored on exactly the live
episodes the production world served (same seeds); under a reward the oracle was not written for, a
policy trained in that world joins the reference; the run's recovery and regret-share figures follow
from the hourly series by hand."""

from __future__ import annotations

import pytest

from rlops.common.config import REPO_ROOT
from rlops.timeline.events import parse_events
from rlops.timeline.regret import RegretMeter, recovery_hours, regret_metrics
from rlops.timeline.world import Hour


def _hour(h: int, live: float, oracle: float, rules: float) -> Hour:
    out = Hour(h, live_return=live, reference_return=oracle, rules_return=rules, regret=oracle - live)
    out.regret_share = (oracle - live) / (oracle - rules)
    return out


def test_the_meter_scores_the_same_episodes_the_world_served() -> None:
    import torch

    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.traces import rollout_traces
    from rlops.timeline.world import no_policy_fallback

    torch.set_num_threads(1)
    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval")
    meter = RegretMeter()
    frames = []
    for seed, n in ((1000, 120), (5000, 80)):  # two traffic groups of one hour
        frames.append(
            rollout_traces(
                pack,
                no_policy_fallback,
                n,
                seed=seed,
                profile="live",
                reward_fn="v1",
                source="live",
                episode_prefix=f"g{seed}",
            )
        )
        meter.add(pack, seed, n, "v1")
    import pandas as pd

    df = pd.concat(frames)
    hour = Hour(0, live_return=float(df.groupby("episode_id")["reward_total"].sum().mean()))
    meter.close(hour)
    # the rule engine served these episodes: its score on the same seeds is the live return itself
    assert hour.rules_return == pytest.approx(hour.live_return, abs=1e-5)
    assert hour.oracle_return > hour.rules_return
    # the oracle's own reward is in force: it is the reference, nothing is trained
    assert hour.reference_return == hour.oracle_return and hour.trained_return is None and meter.trained == {}
    assert hour.regret == pytest.approx(hour.oracle_return - hour.live_return)
    assert hour.regret_share == pytest.approx(1.0, abs=1e-4)
    nxt = Hour(1, live_return=0.5)
    meter.close(nxt)  # nothing served since: no figures
    assert nxt.oracle_return is None and nxt.reference_return is None


def test_after_a_reward_change_a_policy_trained_in_that_world_joins_the_reference() -> None:
    import torch

    from rlops.sandbox.pack import load_pack

    torch.set_num_threads(1)
    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval")
    meter = RegretMeter(oracle_reward="v1", reference_timesteps=16_384)
    meter.add(pack, 1000, 100, "v0")
    meter.add(pack, 2000, 100, "v0")  # the same world and reward: trained once
    hour = Hour(0, live_return=0.0)
    meter.close(hour)
    assert list(meter.trained) == ["credit_approval:v0"]
    assert meter.trained["credit_approval:v0"]["steps"] >= 16_384 * 0.5
    assert hour.trained_return is not None and hour.oracle_return is not None
    # per block of episodes the better of the two: at least either one over the hour
    assert hour.reference_return >= max(hour.oracle_return, hour.trained_return) - 1e-9
    assert hour.regret == pytest.approx(hour.reference_return - hour.live_return)


def test_recovery_and_regret_share_by_hand() -> None:
    hours = [
        _hour(0, 0.2, 0.7, 0.2),
        _hour(1, 0.68, 0.7, 0.2),
        _hour(2, 0.5, 0.7, 0.2),
        _hour(3, 0.60, 0.7, 0.2),
        _hour(4, 0.67, 0.7, 0.2),
    ]
    # onset at 2: hour 2 (0.5 < 0.665) and 3 (0.60) miss 95 %, hour 4 (0.67) makes it: 5 − 2 = 3 h
    assert recovery_hours(hours, 2.0) == 3.0
    assert recovery_hours(hours[:4], 2.5) is None  # never within the run
    assert recovery_hours(hours, 4.5) == 0.5  # the hour the event falls in counts from its onset
    events = parse_events(
        [{"at_hour": 2, "kind": "latency", "action": "approve", "factor": 2}, {"at_hour": 3, "kind": "bad_candidate"}]
    )
    m = regret_metrics(hours, events, first_promotion_hour=1)
    # hours after the first promotion (2, 3, 4): shares 0.4, 0.2, 0.06
    assert m["mean_regret_share"] == pytest.approx((0.4 + 0.2 + 0.06) / 3, abs=1e-4)
    assert list(m["recovery_h"]) == ["h2 latency (action=approve, factor=2)"]
    assert regret_metrics([Hour(0, live_return=1.0)], events, 0) == {}  # no oracle: no figures

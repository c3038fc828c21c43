"""A running PolicyClient follows the registry by itself: promotions, staged traffic shares,
rollbacks and withdrawn challengers reach it within one poll period, swapped in atomically."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from rlops.agent_sdk.policy_client import PolicyClient
from tests.agent_sdk.client_kit import (
    NAME,
    PACK_DIR,
    SCENARIO,
    STATE,
    register,
    register_pair,
    tracker,
)
from tests.policy_kit import preference_policy


class SimClock:
    """Simulated seconds, moved by the test."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(PACK_DIR, check_liveness=False)


@pytest.fixture
def pair(tmp_tracking: str, pack: Any) -> tuple[str, str]:
    v1, v2 = register_pair(pack)
    tracker().set_alias(NAME, "champion", v1)
    return v1, v2


def ref(v: str) -> str:
    return f"{NAME}/{v}"


def test_promotion_stages_and_rollback_reach_the_client_within_one_period(
    pair: tuple[str, str], tmp_tracking: str
) -> None:
    v1, v2 = pair
    t = tracker()
    clock = SimClock(1000.0)
    keys = [f"user-{i}" for i in range(400)]
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=30, clock=clock) as c:
        assert c.decide(STATE, key="a").policy_version == ref(v1)

        def served(at: float) -> dict[str, int]:
            clock.t = at
            out: dict[str, int] = {}
            for k in keys:
                d = c.decide(STATE, key=k)
                assert not d.fallback, d.fallback_reason
                out[d.policy_version] = out.get(d.policy_version, 0) + 1
            return out

        # Staged challenger at 5 %: unseen until the period has passed on the client's clock.
        t.set_alias(NAME, "challenger", v2)
        t.set_model_version_tags(NAME, v2, {"traffic_fraction": 0.05})
        assert served(1010.0) == {ref(v1): len(keys)}
        share = served(1030.0).get(ref(v2), 0) / len(keys)
        assert 0.02 < share < 0.09
        # The next stage: the share follows the tag, the same keys stay in the challenger arm.
        before = {k for k in keys if c.route(k) == "challenger"}
        t.set_model_version_tags(NAME, v2, {"traffic_fraction": 0.15})
        share = served(1061.0).get(ref(v2), 0) / len(keys)
        assert 0.10 < share < 0.21 and before <= {k for k in keys if c.route(k) == "challenger"}
        # Promotion: the alias moves at t=1070; the first decision by v2 as champion comes at the next poll.
        t.set_alias(NAME, "champion", v2)
        t.delete_alias(NAME, "challenger")
        moved_at = 1070.0
        assert ref(v1) in served(1080.0)
        assert served(1092.0) == {ref(v2): len(keys)}
        assert c.promotion_to_agent_s(v2, moved_at) == 22.0  # polls at 1030, 1061, 1092: served as champion at 1092
        assert c.first_served_at(v2, "challenger") == 1030.0
        # Rollback walks champion back to v1: picked up at the next poll, no download needed.
        t.set_alias(NAME, "champion", v1)
        assert served(1125.0) == {ref(v1): len(keys)}
        assert c.promotion_to_agent_s(v1, 1100.0) == 25.0  # since it became champion again, not its first day
        groups = [(ch.group, ch.old, ch.new) for ch in c.changes]
        assert groups == [
            ("champion", None, ref(v1)),
            ("challenger", None, ref(v2)),
            ("champion", ref(v1), ref(v2)),
            ("challenger", ref(v2), None),
            ("champion", ref(v2), ref(v1)),
        ]
        assert c.fallback_rate == 0.0


def test_promotion_to_agent_latency_on_a_simulated_clock(pair: tuple[str, str], tmp_tracking: str, pack: Any) -> None:
    v1, v2 = pair
    v3 = register(pack, preference_policy(pack, {"escalate_to_human": 5}))
    clock = SimClock(0.0)
    moves = {47.0: v2, 203.0: v3}  # when the alias moves in the registry
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=30, clock=clock) as c:
        assert c.promotion_to_agent_s(v3, 0.0) is None  # never served
        served = []
        for i in range(300 * 2):  # a request every 0.5 s of simulated time
            clock.t = i * 0.5
            if clock.t in moves:
                tracker().set_alias(NAME, "champion", moves[clock.t])
            served.append(c.decide(STATE, key=f"k{i}").policy_version)
        # Polls at 30, 60, 90, …: v2 is first served at 60 (13 s after its move), v3 at 210 (7 s).
        assert c.promotion_to_agent_s(v2, 47.0) == 13.0 and c.promotion_to_agent_s(v3, 203.0) == 7.0
        assert [c.first_served_at(v) for v in (v1, v2, v3)] == [0.0, 60.0, 210.0]
        assert served.index(ref(v2)) == 120 and served.index(ref(v3)) == 420


def test_no_poll_without_a_period_until_refresh_or_notify(pair: tuple[str, str], tmp_tracking: str) -> None:
    v1, v2 = pair
    clock = SimClock()
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, clock=clock) as c:
        tracker().set_alias(NAME, "champion", v2)
        clock.t = 1e6
        assert c.decide(STATE).policy_version == ref(v1)
        c.notify()  # e.g. the agent received the registry's alias webhook
        assert c.decide(STATE).policy_version == ref(v2)
        tracker().set_alias(NAME, "champion", v1)
        assert c.refresh() == {"champion": v1, "challenger": None}
        assert c.decide(STATE).policy_version == ref(v1)


def test_background_poll_follows_the_registry_in_real_time(pair: tuple[str, str], tmp_tracking: str) -> None:
    v1, v2 = pair
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=0.2) as c:
        assert c._thread is not None and c._thread.is_alive()
        assert c.decide(STATE).policy_version == ref(v1)
        tracker().set_alias(NAME, "champion", v2)
        deadline = time.monotonic() + 30
        while c.decide(STATE).policy_version != ref(v2):
            assert time.monotonic() < deadline, "the poller never picked up the promotion"
            time.sleep(0.05)
        thread = c._thread
    thread.join(timeout=5)
    assert not thread.is_alive()  # close() stops the poller


def test_a_failing_poll_keeps_serving_what_is_loaded(
    pair: tuple[str, str], tmp_tracking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, _ = pair
    clock = SimClock()
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=30, clock=clock) as c:

        def down(*a: Any, **k: Any) -> Any:
            raise ConnectionError("registry unreachable")

        monkeypatch.setattr(c.source, "resolve", down)
        clock.t = 60.0
        d = c.decide(STATE)
        assert not d.fallback and d.policy_version == ref(v1)
        assert "registry unreachable" in c.load_errors["champion"]


def test_no_decision_sees_half_a_swap(pair: tuple[str, str], tmp_tracking: str) -> None:
    """Two serving states alternate — A: champion v1 with v2 shadowing; B: champion v2 with v1
    shadowing — while threads decide. Every decision names its served and its shadow version;
    a half-applied swap would show the same version twice."""
    v1, v2 = pair
    t = tracker()
    t.set_alias(NAME, "challenger", v2)
    with PolicyClient(
        tmp_tracking,
        SCENARIO,
        PACK_DIR,
        timeout_ms=10_000,
        refresh_every_s=None,
        challenger_fraction=0.0,
        shadow="challenger",
    ) as c:
        c.refresh()
        seen: list[tuple[str, str]] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def decide() -> None:
            try:
                while not stop.is_set():
                    d = c.decide(STATE, key="k")
                    if not d.fallback and d.shadow is not None and d.shadow.error is None:
                        seen.append((d.policy_version, d.shadow.policy_version))
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=decide) for _ in range(3)]
        for th in threads:
            th.start()
        try:
            for i in range(12):
                champion, shadow = (v2, v1) if i % 2 == 0 else (v1, v2)
                t.set_alias(NAME, "champion", champion)
                t.set_alias(NAME, "challenger", shadow)
                c.refresh()
                time.sleep(0.02)
        finally:
            stop.set()
            for th in threads:
                th.join()
        assert not errors, errors
        assert len(seen) > 20 and set(seen) <= {(ref(v1), ref(v2)), (ref(v2), ref(v1))}, set(seen)
        assert {s[0] for s in seen} == {ref(v1), ref(v2)}


def test_arguments_and_a_client_that_has_not_loaded_yet(pair: tuple[str, str], tmp_tracking: str) -> None:
    from rlops.common.errors import UserError

    v1, _ = pair
    for bad in (0, -1, float("inf"), float("nan"), "30"):
        with pytest.raises(UserError, match="refresh_every_s"):
            PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=bad)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="exploration"):
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, exploration=1.5)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, load=False, refresh_every_s=None) as c:
        d = c.decide(STATE)
        assert d.fallback_reason.startswith("load_error: nothing loaded yet")
    clock = SimClock(5.0)
    with PolicyClient(
        tmp_tracking, SCENARIO, PACK_DIR, load=False, refresh_every_s=30, clock=clock, timeout_ms=5000
    ) as c:
        assert c.serving.generation == 0
        assert c.decide(STATE).policy_version == ref(v1)  # the first decision loads
        assert c.serving.generation == 1 and c.serving.loaded_at == 5.0

"""An agent serving on the rule engine logs one WARNING per cause, not one per decision: thousands of
decisions before the first champion leave one line, the count comes every period and when the
champion serves, and nothing is uncounted (stats, the ``fallbacks`` counter, the trace rows)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from rlops.agent_sdk.policy_client import PolicyClient
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, STATE, register_pair, tracker

LOGGER = "rlops.agent_sdk.policy_client"


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_a_thousand_fallbacks_for_one_cause_are_one_warning_then_counts(
    tmp_tracking: str, tmp_storage_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rlops.sandbox.pack import load_pack

    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = _Clock()
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, clock=clock) as client:
        for _ in range(1000):
            d = client.decide(STATE)
            assert d.fallback and d.fallback_reason.startswith("no_champion: ")  # every row still says so
        warnings = _lines(caplog, logging.WARNING)
        assert len(warnings) == 1 and "rule-engine fallback (no_champion)" in warnings[0]
        assert client.stats()["fallbacks"] == {"no_champion": 1000}
        assert client.stats()["fallback_causes"] == {"no_champion": 1000}
        assert client.fallback_log.pending == {"no_champion": 999}  # the first one had its line

        clock.t += 301  # a period later, the next fallback brings the count
        client.decide(STATE)
        warnings = _lines(caplog, logging.WARNING)
        assert (
            len(warnings) == 2 and "1000 more decision(s) fell back" in warnings[1] and "(no_champion)" in warnings[1]
        )
        for _ in range(5):
            client.decide(STATE)

        torch.set_num_threads(1)
        v1, _ = register_pair(load_pack(PACK_DIR, check_liveness=False))
        tracker().set_alias(NAME, "champion", v1)
        client.refresh()
        assert not client.decide(STATE).fallback  # the champion serves: the count is logged
        recovered = [m for m in _lines(caplog, logging.INFO) if "serves again" in m]
        assert len(recovered) == 1 and "1006 decision(s) fell back" in recovered[0], recovered
        assert "5 since the last line" in recovered[0] and f"{NAME}/{v1}" in recovered[0]
        assert client.stats()["fallback_causes"] == {} and client.fallback_log.pending == {}
        assert len(_lines(caplog, logging.WARNING)) == 2


def test_each_cause_has_its_own_first_warning_and_close_counts_the_rest(
    tmp_tracking: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    wrong = {"profile": STATE["user_profile"]}
    client = PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, bad_state="fallback")
    for _ in range(50):
        client.decide(STATE)
        client.decide(wrong)
    warnings = _lines(caplog, logging.WARNING)
    assert len(warnings) == 2 and {w.split("(")[1].split(")")[0] for w in warnings} == {"no_champion", "bad_state"}
    client.close()
    closing = sorted(m for m in _lines(caplog, logging.INFO) if "closing" in m)
    assert len(closing) == 2 and all("49 decision(s)" in m and "50 in all" in m for m in closing), closing


def test_batch_fallbacks_join_the_same_count(tmp_tracking: str, caplog: pytest.LogCaptureFixture) -> None:
    from rlops.agent_sdk.batch import batch_policy
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.traces import rollout_traces

    caplog.set_level(logging.INFO, logger=LOGGER)
    pack: Any = load_pack(PACK_DIR, check_liveness=False)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None) as client:
        client.decide(STATE)
        rows = rollout_traces(pack, batch_policy(client), 20, seed=1)
        assert rows["fallback"].all()
        assert len(_lines(caplog, logging.WARNING)) == 1  # the batch's fallbacks are the same cause
        assert client.stats()["fallback_causes"]["no_champion"] == client.fallbacks["no_champion"] > 20

"""The policy client serves a challenger share only to a version rlops staged: a ``challenger``
set by hand in the MLflow UI is a request for the gates, even when its version still carries the
``traffic_fraction`` of an earlier roll-out."""

from __future__ import annotations

from typing import Any

import pytest

from rlops.agent_sdk.policy_client import PolicyClient
from rlops.agent_sdk.serving import CHALLENGER_RECORD_TAG
from rlops.registry import tags as T
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, STATE, register_pair, tracker


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(PACK_DIR, check_liveness=False)


def _share(client: PolicyClient, version: str) -> float:
    keys = [f"user-{i}" for i in range(2000)]
    served = [client.decide(STATE, key=k).policy_version for k in keys]
    return served.count(f"{NAME}/{version}") / len(keys)


def test_the_agent_names_the_record_rlops_writes() -> None:
    assert T.alias_written("challenger") == CHALLENGER_RECORD_TAG


def test_a_hand_set_challenger_with_an_old_share_serves_no_traffic(tmp_tracking: str, pack: Any) -> None:
    t = tracker()
    v1, v2 = register_pair(pack)
    t.set_alias(NAME, "champion", v1)
    t.set_model_version_tags(NAME, v2, {"traffic_fraction": 0.05})  # left from an earlier roll-out
    t.client.set_registered_model_alias(NAME, "challenger", v2)  # what the MLflow UI does
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None) as c:
        assert c.refresh() == {"champion": v1, "challenger": v2}
        assert c.challenger_fraction == 0.0 and _share(c, v2) == 0.0
        # the explicit share of the agent's own configuration does not serve it either
    with PolicyClient(
        tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, challenger_fraction=0.5
    ) as c:
        assert c.challenger_fraction == 0.0
        # rlops stages it (its gates passed): the record names v2 and the share is served
        t.set_alias(NAME, "challenger", v2)
        c.refresh()
        assert c.challenger_fraction == 0.5
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None) as c:
        assert c.challenger_fraction == pytest.approx(0.05) and 0.02 < _share(c, v2) < 0.09
        # the alias moved by hand to another version: the record still names v2, v1 gets nothing
        t.client.set_registered_model_alias(NAME, "challenger", v1)
        t.set_model_version_tags(NAME, v1, {"traffic_fraction": 0.3})
        assert c.refresh()["challenger"] == v1 and c.challenger_fraction == 0.0

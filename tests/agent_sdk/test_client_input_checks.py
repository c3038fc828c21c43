"""What the policy client refuses or contains: a timeout that would send every decision to the rule
engine, a shadow version that does not exist, a state value the policy never saw (outside the
pack's declared range, or past float32), and a model whose code ends the process while it loads."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from rlops.agent_sdk.encoding import ObservationEncoder, StateError
from rlops.agent_sdk.policy_client import PolicyClient
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, STATE, register_pair, tracker


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(PACK_DIR, check_liveness=False)


@pytest.fixture
def pair(tmp_tracking: str, tmp_storage_root: str, pack: Any) -> tuple[str, str]:
    """v1 registered (credit report first), v2 registered (fraud check first); no aliases."""
    torch.set_num_threads(1)
    return register_pair(pack)


def _with_age(age: Any) -> dict[str, Any]:
    state = copy.deepcopy(STATE)
    state["user_profile"]["age"] = age
    return state


# --------------------------------------------------------------------------- timeout_ms
@pytest.mark.parametrize("timeout_ms", [math.nan, -5, 0, math.inf, True, "50"])
def test_a_timeout_that_is_no_positive_finite_number_is_refused(timeout_ms: Any) -> None:
    with pytest.raises(ValueError, match=r"timeout_ms=.*finite positive number"):
        PolicyClient("sqlite:///unused.db", SCENARIO, PACK_DIR, timeout_ms=timeout_ms, load=False, refresh_every_s=None)


# --------------------------------------------------------------------------- state values
@pytest.mark.parametrize(
    ("age", "why"),
    [(1e308, "finite"), (10**400, "finite"), (-1e6, "outside its declared range"), (91, "outside")],
    ids=["1e308", "10**400", "-1e6", "91"],
)
def test_a_value_the_policy_never_saw_is_an_invalid_state(age: Any, why: str) -> None:
    enc = ObservationEncoder.from_pack(PACK_DIR)
    with pytest.raises(StateError, match=f"user_profile.age.*{why}"):
        enc.encode(_with_age(age))
    S, _, _ = enc.encode(_with_age(age), strict=False)  # the fallback's best-effort row stays in range
    assert 18.0 <= float(S[0, enc.scenario.columns["user_profile.age"]]) <= 90.0


def test_values_at_the_ends_of_the_range_are_read() -> None:
    enc = ObservationEncoder.from_pack(PACK_DIR)
    for age in (18, 90, 90.4):  # an int field rounds as the sandbox does
        enc.encode(_with_age(age))


def test_the_champion_does_not_serve_an_out_of_range_state(pair: tuple[str, str], tmp_tracking: str) -> None:
    v1, _ = pair
    tracker().set_alias(NAME, "champion", v1)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None) as c:
        with pytest.raises(StateError, match="user_profile.age"):
            c.decide(_with_age(1e308))  # before any state was read: raised
        assert c.decide(STATE).policy_version == f"{NAME}/{v1}"
        for age in (1e308, -1e6):  # afterwards: the rule engine, with the reason
            d = c.decide(_with_age(age))
            assert d.test_group == "fallback" and d.fallback_reason is not None
            assert d.fallback_reason.startswith("bad_state") and "user_profile.age" in d.fallback_reason


# --------------------------------------------------------------------------- shadow
def test_a_shadow_version_that_does_not_exist_is_a_load_error(pair: tuple[str, str], tmp_tracking: str) -> None:
    v1, _ = pair
    tracker().set_alias(NAME, "champion", v1)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, shadow="999") as c:
        assert "999" in c.load_errors["shadow"] and "does not exist" in c.load_errors["shadow"]
        assert "999" in c.stats()["load_errors"]["shadow"]
        assert c.decide(STATE).policy_version == f"{NAME}/{v1}"  # the champion still serves


# --------------------------------------------------------------------------- model code at load
def _exits_when_loading(version: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``mlflow.pyfunc.load_model`` runs the model's own code: make ``version``'s call ``exit()``.
    Returns the local paths loaded, in order."""
    import mlflow.pyfunc

    real = mlflow.pyfunc.load_model
    loaded: list[str] = []

    def load_model(path: str, *args: Any, **kwargs: Any) -> Any:
        loaded.append(str(path))
        if f"{Path('/')}v{version}{Path('/')}" in str(path):
            raise SystemExit("the model's code ended the process")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(mlflow.pyfunc, "load_model", load_model)
    return loaded


def test_a_challenger_with_no_traffic_is_not_loaded(
    pair: tuple[str, str], tmp_tracking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, v2 = pair
    t = tracker()
    t.set_alias(NAME, "champion", v1)
    t.set_model_version_tags(NAME, v2, {"traffic_fraction": 0.5})
    t.client.set_registered_model_alias(NAME, "challenger", v2)  # set by hand: rlops staged nothing
    loaded = _exits_when_loading(v2, monkeypatch)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, runtime="torch") as c:
        assert c.refresh() == {"champion": v1, "challenger": v2}
        assert all(f"v{v2}" not in p for p in loaded) and c.load_errors == {}
        assert {c.decide(STATE, key=f"user-{i}").policy_version for i in range(40)} == {f"{NAME}/{v1}"}


def test_a_challenger_whose_code_exits_at_load_is_a_load_error(
    pair: tuple[str, str], tmp_tracking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, v2 = pair
    t = tracker()
    t.set_alias(NAME, "champion", v1)
    t.set_model_version_tags(NAME, v2, {"traffic_fraction": 0.5})
    t.set_alias(NAME, "challenger", v2)  # staged by rlops: it would serve half the keys
    _exits_when_loading(v2, monkeypatch)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, runtime="torch") as c:
        assert "SystemExit" in c.load_errors["challenger"]
        assert {c.decide(STATE, key=f"user-{i}").policy_version for i in range(40)} == {f"{NAME}/{v1}"}
        assert "SystemExit" in c.stats()["load_errors"]["challenger"]

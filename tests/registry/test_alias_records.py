"""Signed alias records across processes: a process whose registry key is not the deployment's
refuses to act on aliases (and changes nothing), while a record written by hand still reads as
forged in the deployment's own processes."""

from __future__ import annotations

import time

import pytest

from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry import tags as T
from rlops.registry.alias_records import (
    KEY_ENV,
    RegistryKeyMismatch,
    _mac,
    key_id,
    record_state,
)
from rlops.registry.aliases import move_champion, rollback
from rlops.registry.client import policy_model_name
from tests.policy_kit import register_placeholders

SCENARIO = "credit_approval"
NAME = policy_model_name(SCENARIO)
KEY_A, KEY_B = "deployment-key", "a-key-of-another-container"


def _ctx(**promotion: str) -> StepContext:
    return StepContext.create(SCENARIO, "20261130T0800", overrides={"promotion": dict(promotion)} if promotion else {})


def test_a_process_with_another_key_refuses_and_the_champion_stays(
    tmp_tracking: str, tmp_storage_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.pipeline_steps.promotion.flow import check_champion, promote_from_alias
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    monkeypatch.setenv(KEY_ENV, KEY_A)
    ctx = _ctx(manual_champion="revert")
    v1, v2, v3 = register_placeholders(ctx, 3)
    move_champion(ctx.tracker, NAME, v1)
    move_champion(ctx.tracker, NAME, v2)  # champion v2, previous v1: rlops' own moves, signed with key A
    tags = ctx.tracker.model_tags(NAME)
    assert tags[T.REGISTRY_KEY_ID] == key_id(KEY_A.encode())
    assert tags[T.alias_signature("champion")].split(":")[1] == key_id(KEY_A.encode())
    before = {v: ctx.tracker.model_version_tags(NAME, v) for v in (v1, v2, v3)}

    # Another process (a CLI without the variable, another container) with key B.
    monkeypatch.setenv(KEY_ENV, KEY_B)
    other = _ctx(manual_champion="revert")
    expected = (
        rf"key has id {key_id(KEY_B.encode())}, but .* signed with key id {key_id(KEY_A.encode())}; set {KEY_ENV}"
    )
    with pytest.raises(RegistryKeyMismatch, match=expected) as err:
        check_champion(other)
    assert "\n" not in str(err.value)
    with pytest.raises(RegistryKeyMismatch):
        other.tracker.set_alias(NAME, "champion", v3)
    with pytest.raises(RegistryKeyMismatch):
        other.tracker.delete_alias(NAME, "challenger")
    with pytest.raises(RegistryKeyMismatch):
        move_champion(other.tracker, NAME, v3)
    with pytest.raises(RegistryKeyMismatch):
        rollback(other.tracker, NAME)
    other.tracker.client.set_registered_model_alias(NAME, "challenger", v3)  # a UI request it must not judge
    with pytest.raises(RegistryKeyMismatch):
        promote_from_alias(other, v3)
    with pytest.raises(RegistryKeyMismatch):
        rollout_step(other)  # the roll-out DAG's tick would tag and move the challenger
    # nothing was deleted, moved or re-tagged
    assert other.tracker.aliases(NAME) == {"champion": v2, "previous": v1, "challenger": v3}
    assert other.tracker.model_tags(NAME) == tags
    assert {v: other.tracker.model_version_tags(NAME, v) for v in (v1, v2, v3)} == before

    # The deployment's key works as before: the champion is rlops' own; a hand-set one is reverted.
    monkeypatch.setenv(KEY_ENV, KEY_A)
    ctx = _ctx(manual_champion="revert")
    assert check_champion(ctx).action == "none"
    ctx.tracker.client.set_registered_model_alias(NAME, "champion", v3)
    res = check_champion(ctx)
    assert res.action == "reverted" and ctx.tracker.get_alias(NAME, "champion") == v2
    assert ctx.tracker.model_version_tags(NAME, v3)[T.MANUAL_CHAMPION] == "reverted"


def test_a_record_forged_by_hand_still_reads_forged(
    tmp_tracking: str, tmp_storage_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY_A)
    ctx = _ctx()
    v1, v2 = register_placeholders(ctx, 2)
    ctx.tracker.set_alias(NAME, "champion", v1)
    ours = key_id(KEY_A.encode())
    sig = T.alias_signature("champion")
    for forged in (f"{time.time_ns()}:{ours}:00ff", f"{time.time_ns()}:{key_id(b'made-up')}:00ff", "1:00"):
        ctx.tracker.client.set_registered_model_tag(NAME, T.alias_written("champion"), v2)
        ctx.tracker.client.set_registered_model_tag(NAME, sig, forged)
        assert record_state(ctx.tracker.model_tags(NAME), NAME, "champion") == "forged", forged


def test_records_from_before_key_ids_belong_to_the_key_that_verifies_them(
    tmp_tracking: str, tmp_storage_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry signed by an earlier rlops (``<stamp>:<hex>``, no key id claimed): the key that
    verifies its records is the deployment's, and its first signed write claims it."""
    monkeypatch.setenv(KEY_ENV, KEY_A)
    ctx = _ctx()
    (v1,) = register_placeholders(ctx, 1)
    client = ctx.tracker.client
    stamp = str(time.time_ns())
    client.set_registered_model_alias(NAME, "champion", v1)
    client.set_registered_model_tag(NAME, T.alias_written("champion"), v1)
    client.set_registered_model_tag(
        NAME, T.alias_signature("champion"), f"{stamp}:{_mac(KEY_A.encode(), NAME, 'champion', v1, stamp)}"
    )
    monkeypatch.setenv(KEY_ENV, KEY_B)
    with pytest.raises(RegistryKeyMismatch, match="unrecorded"):
        record_state(ctx.tracker.model_tags(NAME), NAME, "champion")
    with pytest.raises(RegistryKeyMismatch):
        ctx.tracker.delete_alias(NAME, "champion")
    assert ctx.tracker.get_alias(NAME, "champion") == v1
    monkeypatch.setenv(KEY_ENV, KEY_A)
    assert record_state(ctx.tracker.model_tags(NAME), NAME, "champion") == "verified"
    ctx.tracker.set_alias(NAME, "previous", v1)
    assert ctx.tracker.model_tags(NAME)[T.REGISTRY_KEY_ID] == key_id(KEY_A.encode())

"""Signed alias records across processes: a process whose registry key is not the deployment's
refuses to act on aliases (and changes nothing), while a record written by hand still reads as
forged in the deployment's own processes."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("signature", ["none", "made-up", "of-another-history"])
def test_rollback_refuses_a_champion_history_written_by_hand(
    rlops_home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signature: str
) -> None:
    """``rlops.champion.history`` edited with the MLflow client (what the UI does): rollback must not
    make a version champion that rlops never promoted; one error line, exit 2, nothing moved."""
    from rlops.cli import main

    monkeypatch.setenv(KEY_ENV, KEY_A)
    ctx = _ctx()
    v1, v2 = register_placeholders(ctx, 2)
    move_champion(ctx.tracker, NAME, v1)  # v1: the first champion, nothing to go back to
    client = ctx.tracker.client
    client.set_registered_model_tag(NAME, T.CHAMPION_HISTORY, json.dumps([v2]))
    forged = {
        "made-up": f"{time.time_ns()}:{key_id(KEY_A.encode())}:00ff",
        # rlops' own signature, of the history it wrote (the empty one), beside another history
        "of-another-history": ctx.tracker.model_tags(NAME).get(T.CHAMPION_HISTORY_SIGNATURE),
    }.get(signature)
    if forged is not None:
        client.set_registered_model_tag(NAME, T.CHAMPION_HISTORY_SIGNATURE, forged)
    before = ctx.tracker.model_version_tags(NAME, v2)

    capsys.readouterr()
    rc = main(["model", "rollback", "--scenario", SCENARIO])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and f"v{v2}" in lines[0] and "outside rlops" in lines[0], err
    assert "champion restored" not in out
    assert ctx.tracker.aliases(NAME) == {"champion": v1}
    assert ctx.tracker.model_version_tags(NAME, v2) == before  # not tagged as rlops' own move


def test_rollback_returns_only_to_signed_champions(
    tmp_tracking: str, tmp_storage_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version appended by hand to rlops' signed history is refused; the history rlops signed (or,
    without one, the 'previous' rlops set) still rolls back."""
    from rlops.common.errors import UserError

    monkeypatch.setenv(KEY_ENV, KEY_A)
    ctx = _ctx()
    v1, v2, v3, v4 = register_placeholders(ctx, 4)
    for v in (v1, v2, v3):
        move_champion(ctx.tracker, NAME, v)  # champion v3, history [v1, v2]
    client = ctx.tracker.client
    signed = ctx.tracker.model_tags(NAME)[T.CHAMPION_HISTORY]
    client.set_registered_model_tag(NAME, T.CHAMPION_HISTORY, json.dumps([v1, v2, v4]))
    with pytest.raises(UserError, match=f"v{v4} is not a version rlops made champion"):
        rollback(ctx.tracker, NAME)
    assert ctx.tracker.aliases(NAME) == {"champion": v3, "previous": v2}
    client.set_registered_model_tag(NAME, T.CHAMPION_HISTORY, signed)  # put back: verifies again
    assert (rollback(ctx.tracker, NAME).champion, rollback(ctx.tracker, NAME).champion) == (v2, v1)
    # A history without a signature (written before signing, or by hand) vouches only for the
    # 'previous' rlops' own record names: the entries before it are never restored.
    move_champion(ctx.tracker, NAME, v2)
    move_champion(ctx.tracker, NAME, v3)
    client.delete_registered_model_tag(NAME, T.CHAMPION_HISTORY_SIGNATURE)
    client.set_registered_model_tag(NAME, T.CHAMPION_HISTORY, json.dumps([v4, v1, v2]))
    state = rollback(ctx.tracker, NAME)
    assert (state.champion, state.previous) == (v2, None)

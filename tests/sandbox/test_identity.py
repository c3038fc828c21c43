"""One home each: policy identity, reward selection, default profile."""

from __future__ import annotations

import pytest

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef, canonical_policy
from rlops.sandbox.pack import load_pack
from rlops.sandbox.profiles import default_profile
from rlops.sandbox.reward_choice import choose_reward

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"


@pytest.mark.parametrize(
    "text",
    [
        "2",
        "v2",
        "credit_approval-policy/2",
        "models:/credit_approval-policy/2",
        "credit_approval-policy/v2",
        PolicyRef("credit_approval", version="2"),
    ],
)
def test_every_spelling_of_a_version_is_one_policy(text):
    assert canonical_policy(text, "credit_approval") == "credit_approval-policy/2"
    assert PolicyRef.parse(text, "credit_approval") == PolicyRef("credit_approval", version="2")


@pytest.mark.parametrize("text", ["champion", "challenger", "previous", "credit_approval-policy@champion"])
def test_aliases(text):
    ref = PolicyRef.parse(text, "credit_approval")
    assert ref.alias in ("champion", "challenger", "previous") and ref.version is None
    assert ref.model_name == "credit_approval-policy"
    assert ref.resolved("7") == PolicyRef("credit_approval", version="7")


def test_rules_and_bad_input():
    assert PolicyRef.parse("rules").is_rules and str(PolicyRef.parse("rules", "x")) == "rules"
    for bad in ["", "-1", "latest", "credit_approval-policy@best", "../2", "credit_approval-policy/2/3"]:
        with pytest.raises(UserError, match="policy"):
            PolicyRef.parse(bad, "credit_approval")
    with pytest.raises(UserError, match="belongs to scenario"):
        PolicyRef.parse("claims-policy/2", "credit_approval")
    with pytest.raises(UserError, match="scenario is needed"):
        _ = PolicyRef.parse("2").model_name


@pytest.fixture(scope="module")
def credit():
    return load_pack(CREDIT)


def test_reward_choice_order(credit):
    assert choose_reward(credit, "v0").reward_fn == "v0"
    assert choose_reward(credit, "reward_v0.py").reward_fn == "v0"
    assert choose_reward(credit, None, "v0").source == "params.yaml"
    newest = choose_reward(credit, None, "v9")  # the project default is not in this pack
    assert (newest.reward_fn, newest.source) == ("v1", "newest in the pack")
    choice = choose_reward(credit, "v1")
    assert choice.reward_fn_sha256 == credit.reward_fn("v1").version and len(choice.reward_fn_sha256) == 64
    assert choice.as_fields() == {"reward_fn": "v1", "reward_fn_sha256": choice.reward_fn_sha256}
    with pytest.raises(UserError, match="expected one of those labels"):
        choose_reward(credit, "v7")


@pytest.mark.parametrize(
    ("pack_default", "project"), [(None, None), (None, "v0"), (None, "v9"), ("v0", "v1"), ("v7", None)]
)
def test_dag_parse_time_reward_choice_is_the_loaded_packs(tmp_path, pack_default, project):
    """The DAG files choose from the pack's files without loading it: the same rule, the same answer
    or the same refusal (a pack whose own reward_fn it lacks gets no DAGs, never a guessed v1)."""
    import shutil
    from types import SimpleNamespace

    from rlops.pipeline_steps.orchestration.settings import pack_reward_fn

    pack_dir = tmp_path / "credit_approval"
    shutil.copytree(CREDIT, pack_dir)
    (pack_dir / "params.yaml").write_text(f"reward_fn: {pack_default}\n" if pack_default else "")
    ctx = SimpleNamespace(pack_dir=pack_dir, scenario="credit_approval")
    params = {"reward_fn": project} if project else {}
    try:
        expected = choose_reward(load_pack(pack_dir), None, project).reward_fn
    except UserError as exc:
        with pytest.raises(UserError, match="expected one of those labels") as got:
            pack_reward_fn(ctx, params)
        assert str(got.value) == str(exc)
        return
    assert pack_reward_fn(ctx, params) == expected


def test_a_pack_without_reward_modules_gets_a_reason_not_a_guess(tmp_path):
    from types import SimpleNamespace

    from rlops.pipeline_steps.orchestration.settings import pack_reward_fn

    (tmp_path / "bare").mkdir()
    with pytest.raises(UserError, match="pack bare has no reward_v"):
        pack_reward_fn(SimpleNamespace(pack_dir=tmp_path / "bare", scenario="bare"), {"reward_fn": "v1"})


def test_default_profile_roles(credit):
    assert default_profile(credit, "production") == "live"
    assert default_profile(credit, "sandbox") == credit.scenario.spec.default_profile  # before any calibration
    assert default_profile(credit, "sandbox", "live") == "live"
    with pytest.raises(UserError, match="profile 'nope'"):
        default_profile(credit, "sandbox", "nope")

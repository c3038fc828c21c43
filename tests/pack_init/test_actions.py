"""Preconditions read from a log respect what the log says was legal: where every logged mask is
all ones, an action taken only for some users is not restricted to them (``--strict`` still
restricts it); where the masks forbid it elsewhere, the precondition says where it was taken."""

from __future__ import annotations

import pandas as pd

from rlops.pack_init.actions import infer_actions
from rlops.pack_init.fields import infer_fields


def _log(mask: str) -> pd.DataFrame:
    n = 200
    segment = ["young" if i % 2 else "senior" for i in range(n)]
    return pd.DataFrame(
        {
            "episode_id": [f"e{i}" for i in range(n)],
            "step": 0,
            "done": True,
            "action": ["offer_a" if s == "young" else "offer_b" for s in segment],
            "action_mask": mask,
            "state.user.segment": segment,
        }
    )


def _preconditions(df: pd.DataFrame, strict: bool = False) -> dict[str, str]:
    """Each action's precondition as ``rlops init`` writes it (where it was logged is a comment
    unless ``strict``)."""
    fields, _ = infer_fields(df, ("user.segment",))
    return {a.name: a.condition(with_bounds=strict) for a in infer_actions(df, fields, strict=strict)}


def test_all_ones_masks_infer_no_precondition_from_where_an_action_was_taken() -> None:
    assert _preconditions(_log("11")) == {"offer_b": "true", "offer_a": "true"}


def test_strict_or_masks_that_forbid_keep_the_logged_context() -> None:
    strict = _preconditions(_log("11"), strict=True)
    assert strict["offer_a"] != "true" and strict["offer_b"] == "user.segment == 'senior'"
    assert _preconditions(_log("10"))["offer_a"] == "user.segment == 'young'"

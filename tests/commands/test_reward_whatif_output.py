"""``rlops reward whatif`` without ``--json``: the what-if as a person reads it."""

from __future__ import annotations

from rlops.commands.reward import summary_lines


def est(mean: float | None, low: float | None, high: float | None, n: int = 100) -> dict[str, float | int | None]:
    return {"mean": mean, "low": low, "high": high, "n": n}


def test_summary_names_the_change_the_comparison_every_kpi_and_what_to_do_next() -> None:
    side = {"champion": est(0.1, 0.05, 0.15), "whatif": est(0.02, 0.0, 0.05), "difference": est(-0.08, -0.12, -0.04)}
    result = {
        "scenario": "credit_approval",
        "change": "compliance=3",
        "reward_fn": "v1",
        "whatif_reward_fn": "v2",
        "whatif_reward_fn_sha256": "ab" * 32,
        "champion": "champion v4",
        "episodes": 100,
        "seed": 1_000_000,
        "world": "calibrated sandbox",
        "confidence": 0.95,
        "kpis": {"unlisted_rejection_rate": {"rate": True}, "approved_amount": {"rate": False}},
        "segments": {
            "overall": {
                "episodes": 100,
                "returns": {"current": {**side}},
                "kpis": {
                    "unlisted_rejection_rate": side,
                    "approved_amount": {
                        "champion": est(None, None, None, 0),
                        "whatif": side["whatif"],
                        "difference": est(None, None, None, 0),
                    },
                },
            }
        },
        "decision_map": {
            "states": 2000,
            "decisions_changed": 0.125,
            "clusters": [
                {
                    "name": "low credit score",
                    "states": 500,
                    "champion_top_action": "approve",
                    "whatif_top_action": "reject",
                    "top_action_changed": True,
                },
                {
                    "name": "high income",
                    "states": 300,
                    "champion_top_action": "approve",
                    "whatif_top_action": "approve",
                    "top_action_changed": False,
                },
            ],
            "changed": ["low credit score"],
        },
        "notes": [],
        "saved_as": None,
        "would_save_as": "scenarios/credit_approval/reward_v2.py",
    }
    text = "\n".join(summary_lines(result))
    assert "compliance=3 (reward v1 → v2, sha256 abababababab)" in text
    assert "compared with champion v4 on 100 held-out episodes (seed 1000000) of the calibrated sandbox" in text
    assert "unlisted_rejection_rate" in text and "10.0% [5.0%, 15.0%]" in text and "Δ -8.0% [-12.0%, -4.0%]" in text
    assert "approved_amount" in text and "n/a" in text
    assert "12.5% of 2000 states decided differently; top action changed in 1 of 2 clusters" in text
    assert "low credit score (500 states): approve → reject" in text and "high income (" not in text
    assert "--save writes it as scenarios/credit_approval/reward_v2.py" in text

"""What a user reads in the MLflow UI: descriptions of registered models and their versions.

A policy version's description says what it is (training mode, reward function and its hash,
sandbox calibration, data) and, once evaluated, the gate summary — one line per gate — which
each evaluation replaces (:func:`rlops.pipeline_steps.promotion.gate_table.with_gate_summary`).
"""

from __future__ import annotations

from typing import Any

MODEL_DESCRIPTION = (
    "Decision policies of the '{scenario}' agent, trained by rlops with masked PPO in the scenario sandbox.\n\n"
    "Aliases: `champion` serves production; `challenger` serves its `traffic_fraction` share in a staged "
    "roll-out; `previous` is where `rlops model rollback` returns to. Each version's description names its "
    "reward function, sandbox calibration and data, and the gate summary of its last evaluation.\n\n"
    "To promote a version, set the alias `challenger` on it: rlops evaluates it against the champion and "
    "promotes it only if every gate passes (outcome in the version's `rlops.promotion.*` tags). A `champion` "
    "alias set by hand is put back (and re-gated, per promotion.manual_champion)."
)


def version_description(scenario: str, base: dict[str, Any], mean_return: float, completion_rate: float) -> str:
    """What a user reads on the version page of the MLflow UI: what it is, reward, calibration, its
    held-out ``mean_return`` and ``completion_rate`` in training; evaluation appends the gate summary."""
    return (
        f"Masked-PPO decision policy for scenario '{scenario}' ({base['mode']} training, run key "
        f"{base['run_key']}, warm start: {base['parent_champion'] or 'none'}).\n\n"
        f"Reward function: {base['reward_fn']} (sha256 {str(base['reward_fn_sha256'])[:12]}).\n"
        f"Sandbox calibration: {base['calibration_version']} (profile {base['profile']}); "
        f"data: {base['data_version']}.\n"
        f"Held-out in training: mean return {mean_return:.4f}, completion {completion_rate:.1%}.\n\n"
        "Gates: not evaluated yet — promotion runs `rlops model evaluate/promote`, or set the alias "
        "`challenger` on this version to request a gated promotion."
    )

"""The reward page's business signals: each signal-driven weight, the value in force against the
value the champion was trained with, and the signal's recent values (its drift).

Read-only: the signal documents in storage (:class:`rlops.pipeline_steps.infra.signal_store.SignalStore`)
and the champion's model version tags.
"""

from __future__ import annotations

from typing import Any

from rlops.console.data import ProjectData
from rlops.console.svg import sparkline
from rlops.pipeline_steps.infra.signal_store import SignalStore, pack_declarations, reading_of

HISTORY_SHOWN = 20


def signal_rows(data: ProjectData, scenario: str) -> dict[str, list[dict[str, Any]]]:
    """Per reward function label, one row per signal-driven weight it declares."""
    pack = data.pack(scenario)
    decls = pack_declarations(pack.name, pack.reward_fns)
    if not decls:
        return {}
    ctx = data.context(scenario)
    store = SignalStore(ctx.storage, ctx.config.signals)
    champion = next((v for v in data.model_versions(scenario, "policy") if "champion" in v["aliases"]), None)
    delta_share = ctx.config.signals.retrain_delta
    out: dict[str, list[dict[str, Any]]] = {}
    for d in decls:
        sw = d.weight
        history = store.history(sw.signal)
        reading = reading_of(sw.signal, history, [x for x in decls if x.weight.signal == sw.signal])
        trained_text = (champion or {}).get("tags", {}).get(f"signal.{sw.signal}")
        trained = float(trained_text) if trained_text is not None else (sw.baseline if champion else None)
        threshold = delta_share * (sw.high - sw.low)
        moved = trained is not None and abs(reading.value - trained) > threshold
        accepted = [h.value for h in history if h.accepted]
        out.setdefault(d.reward_fn, []).append(
            {
                "signal": sw.signal,
                "objective": sw.objective,
                "range": f"[{sw.low:g}, {sw.high:g}]",
                "weights": f"{sw.weight_low:g} → {sw.weight_high:g}",
                "baseline": sw.baseline,
                "value": reading.value,
                "status": reading.status,
                "note": reading.note,
                "set_at": reading.set_at or "—",
                "weight_in_force": round(sw.weight(reading.value), 6),
                "champion_version": (champion or {}).get("version"),
                "champion_value": trained,
                "threshold": threshold,
                "moved": moved,
                "trend": sparkline([*accepted[-HISTORY_SHOWN:]]) if len(accepted) > 1 else "",
                "history": [h.as_dict() for h in reversed(history[-HISTORY_SHOWN:])],
            }
        )
    return out

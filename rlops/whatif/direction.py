"""Did the KPIs move the way a changed weight says?

A weight rewards or penalises what its objective's components score, and each component cites a
rule; a KPI that names one of those rules (``rule_ref``) and says which way is better (``better``)
measures the same thing. Raising the weight should improve those KPIs, lowering it should worsen
them. A move counts when its interval (what-if − champion, overall) excludes 0.
"""

from __future__ import annotations

from typing import Any

from rlops.sandbox.reward import RewardFunction


def linked_kpis(fn: RewardFunction, objective: str, catalogue: dict[str, dict[str, Any]]) -> list[str]:
    """The KPIs that measure a rule of ``objective``'s components and say which way is better."""
    refs = {c.rule_ref for c in fn.components if c.objective == objective}
    return [k for k, meta in catalogue.items() if meta.get("rule_ref") in refs and meta.get("better")]


def weight_direction(result: dict[str, Any], fn: RewardFunction) -> dict[str, Any]:
    """Per changed weight: its linked KPIs, which improved or worsened significantly, and ``ok``:
    raised, at least one improves and none worsens; lowered, at least one worsens and none improves
    (None when the weight has no linked KPI or did not change)."""
    out: dict[str, Any] = {}
    before = fn.weights_at(0)
    overall = result["segments"]["overall"]["kpis"]
    for objective, new in result["weights"].items():
        kpis = linked_kpis(fn, objective, result["kpis"])
        improved, worsened = [], []
        for k in kpis:
            d = overall[k]["difference"]
            if d["low"] is None or d["high"] is None:
                continue
            sign = 1.0 if result["kpis"][k]["better"] == "higher" else -1.0
            lo, hi = sorted((sign * d["low"], sign * d["high"]))
            if lo > 0:
                improved.append(k)
            elif hi < 0:
                worsened.append(k)
        old = before.get(objective, 1.0)
        if not kpis or new == old:
            ok = None
        elif new > old:
            ok = bool(improved) and not worsened
        else:
            ok = bool(worsened) and not improved
        out[objective] = {
            "from": old,
            "to": new,
            "kpis": kpis,
            "improved": improved,
            "worsened": worsened,
            "ok": ok,
        }
    return out


__all__ = ["linked_kpis", "weight_direction"]

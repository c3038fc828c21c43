"""Registry views of the console: promotions and gates, drift and calibration, reward functions.

Each function turns what :class:`rlops.console.data.ProjectData` reads from MLflow and storage
into the plain dicts the templates render; a name that matches nothing raises
:class:`rlops.console.service.NotFound`.
"""

from __future__ import annotations

import difflib
import math
import re
from datetime import UTC, datetime
from typing import Any

from rlops.console.data import ProjectData
from rlops.console.offpolicy import evaluation_ope
from rlops.console.service import NotFound
from rlops.console.signal_views import signal_rows
from rlops.pipeline_steps.promotion.gates import FAIL, SKIPPED, gate_state
from rlops.registry import tags as T

RUN_ID_RE = re.compile(r"^[0-9a-f]{32}$")
LINEAGE = (
    ("reward function", T.VERSION.REWARD_FN),
    ("reward fn sha256", T.VERSION.REWARD_FN_SHA256),
    ("reward fn model version", T.VERSION.REWARD_FN_MODEL_VERSION),
    ("reward model", T.VERSION.REWARD_MODEL_VERSION),
    ("calibration", T.VERSION.CALIBRATION_VERSION),
    ("data version", T.VERSION.DATA_VERSION),
    ("mode", T.VERSION.MODE),
    ("parent champion", T.VERSION.PARENT_CHAMPION),
)


def when(ms: int | float | None) -> str:
    if not ms:
        return "—"
    try:
        return datetime.fromtimestamp(float(ms) / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "—"


def tag_time_ms(value: str | None) -> float | None:
    """A timestamp tag (ISO 8601, or Unix seconds/milliseconds) in ms; None when it is neither —
    a tag anyone can edit in the MLflow UI never breaks a page."""
    if not value:
        return None
    text = str(value).strip()
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp() * 1000
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        return None
    if not (math.isfinite(f) and f > 0):
        return None
    return f if f > 1e11 else f * 1000


def _gates(data: ProjectData, scenario: str, run: dict[str, Any]) -> list[dict[str, Any]]:
    table = data.run_artifact_json(scenario, run["run_id"], "gates.json")
    if (
        not isinstance(table, dict)
        or not isinstance(table.get("columns"), list)
        or not isinstance(table.get("data"), list)
    ):
        return []
    rows = [dict(zip(table["columns"], row)) for row in table["data"] if isinstance(row, list)]
    return [
        {
            "candidate": None,
            "champion": None,
            "threshold": "",
            "detail": "",
            **r,
            "gate": str(r.get("gate", "")),
            "state": gate_state(r),
        }
        for r in rows
    ]


def _verdict(run: dict[str, Any], gates: list[dict[str, Any]]) -> dict[str, Any]:
    """What a person reads of one evaluation: which versions, passed or not, which gates failed
    or were skipped. The run's tags and its gate table must agree; where they do not (a table
    lost, a tag edited) the failing gates win."""
    t = run["tags"]
    failed = [g["gate"] for g in gates if g["state"] == FAIL]
    passed = t.get(T.PASSED) == "true" and not failed
    return {
        "candidate": t.get(T.CANDIDATE) or "?",
        "baseline": t.get(T.BASELINE) or "?",
        "passed": passed,
        "failed_gates": failed,
        "skipped_gates": [g["gate"] for g in gates if g["state"] == SKIPPED],
        "run_key": t.get(T.RUN_KEY) or "",
    }


def promotion(data: ProjectData, scenario: str) -> dict[str, Any]:
    """Versions with lineage and roll-out state, evaluations with their gates, events over time."""
    versions = data.model_versions(scenario, "policy")
    evaluations = []
    for run in reversed(data.runs(scenario, T.STEP, T.EVALUATE)):
        gates = _gates(data, scenario, run)
        evaluations.append(
            {
                **run,
                **_verdict(run, gates),
                "when": when(run["start_ms"]),
                "segments": [g for g in gates if g["gate"].startswith("segment:")],
                "gates": gates,
            }
        )
    events: list[dict[str, Any]] = []
    for e in evaluations:
        events.append(
            {
                "ts": e["start_ms"],
                "what": f"evaluation of v{e['candidate']} vs {e['baseline']}: "
                + ("all gates pass" if e["passed"] else "failed: " + (", ".join(e["failed_gates"]) or "see tags")),
                "run_id": e["run_id"],
            }
        )
    for v in versions:
        t = v["tags"]
        events.append(
            {
                "ts": v["created_ms"],
                "what": f"v{v['version']} registered ({t.get(T.VERSION.MODE, '?')} training)",
                "run_id": v["run_id"],
            }
        )
        promoted = t.get(T.VERSION.PROMOTED_AT)
        if promoted:
            events.append(
                {
                    "ts": tag_time_ms(promoted),
                    "what": f"v{v['version']} promoted to champion"
                    + ("" if tag_time_ms(promoted) else f" (promoted_at tag {promoted!r} is not a time)"),
                    "run_id": None,
                }
            )
        outcome, at = t.get(T.PROMOTION_OUTCOME), tag_time_ms(t.get(T.PROMOTION_AT))
        if outcome and at and outcome != T.OUTCOME_CHAMPION:  # a champion's own event is above
            by = t.get(T.PROMOTION_REQUESTED_BY) or "?"
            events.append(
                {
                    "ts": at,
                    "what": f"v{v['version']} {outcome} (requested by {by}): "
                    f"{str(t.get(T.PROMOTION_REASON) or '')[:300]}",
                    "run_id": None,
                }
            )
        if t.get(T.ROLLED_BACK) == "true":
            events.append(
                {"ts": None, "what": f"v{v['version']} rolled back (champion moved back to previous)", "run_id": None}
            )
    events.sort(key=lambda e: -(e["ts"] or 0))
    stages = _stages(data, scenario)
    rows = [
        {
            **v,
            "when": when(v["created_ms"]),
            "lineage": [(label, v["tags"].get(key)) for label, key in LINEAGE],
            "traffic": _share(v["tags"].get(T.VERSION.TRAFFIC_FRACTION)),
            "eval_run_id": v["tags"].get(T.VERSION.EVAL_RUN_ID)
            if RUN_ID_RE.match(v["tags"].get(T.VERSION.EVAL_RUN_ID) or "")
            else None,
            "stress": v["tags"].get(T.VERSION.STRESS_TEST),
            "rolled_back": v["tags"].get(T.ROLLED_BACK) == "true",
            "outcome": v["tags"].get(T.PROMOTION_OUTCOME),
            "outcome_reason": v["tags"].get(T.PROMOTION_REASON),
        }
        for v in versions
    ]
    champion = next((r for r in rows if "champion" in r["aliases"]), None)
    return {
        "versions": rows,
        "evaluations": evaluations,
        "events": [{**e, "when": when(e["ts"])} for e in events],
        "stages": stages,
        "champion": champion,
        "lineage_labels": [label for label, _ in LINEAGE],
    }


def _share(value: str | None) -> float | None:
    try:
        f = float(value) if value is not None else None
    except ValueError:
        return None
    return f if f is not None and 0.0 <= f <= 1.0 else None


def _stages(data: ProjectData, scenario: str) -> list[float]:
    try:
        return [float(s) for s in data.section(scenario, "evaluate").get("rollout_stages") or (0.05, 0.15, 1.0)]
    except (TypeError, ValueError):
        return [0.05, 0.15, 1.0]


def evaluation(data: ProjectData, scenario: str, run_id: str) -> dict[str, Any]:
    if not RUN_ID_RE.match(run_id):
        raise NotFound(f"{run_id!r} is not an MLflow run id")
    run = next((r for r in data.runs(scenario, T.STEP, T.EVALUATE) if r["run_id"] == run_id), None)
    if run is None:
        raise NotFound(f"no evaluation run {run_id} in the {scenario} experiment")
    gates = _gates(data, scenario, run)
    verdict = _verdict(run, gates)
    summary = data.evaluation_report(scenario, verdict["run_key"], verdict["candidate"]) or {}
    cand, champ = summary.get("candidate_summary") or {}, summary.get("champion_summary") or {}
    cand, champ = (cand if isinstance(cand, dict) else {}), (champ if isinstance(champ, dict) else {})
    metrics = [
        {"metric": k, "candidate": cand.get(k), "champion": champ.get(k)} for k in sorted(set(cand) | set(champ))
    ]
    return {
        "run": run,
        "when": when(run["start_ms"]),
        **verdict,
        "gates": gates,
        "params": run["params"],
        "metrics": metrics,
        "notes": [str(n) for n in summary.get("notes") or []],
        "ope": evaluation_ope(run, gates),
    }


def drift(data: ProjectData, scenario: str, last: int = 12) -> dict[str, Any]:
    """Per-field drift effect and p-value of the last ``last`` drift runs, and each calibration."""
    cfg = data.section(scenario, "drift")
    threshold, min_effect = float(cfg.get("threshold", 0.01)), float(cfg.get("min_effect", 0.0))
    every = data.runs(scenario, T.STEP, T.DRIFT)
    outcome_runs = [r for r in every if "outcome.drifted" in r["metrics"]][-last:]  # drift/outcomes.py
    runs = [r for r in every if "outcome.drifted" not in r["metrics"]][-last:]
    fields = sorted({k.split("/", 1)[1] for r in runs for k in r["metrics"] if k.startswith("drift_effect/")})
    table = []
    for f in fields:
        cells = []
        for r in runs:
            e, p = r["metrics"].get(f"drift_effect/{f}"), r["metrics"].get(f"drift_p/{f}")
            cells.append(
                {"effect": e, "p": p, "drifted": e is not None and p is not None and p < threshold and e >= min_effect}
            )
        table.append({"field": f, "cells": cells, "series": [c["effect"] for c in cells]})
    cal_runs = {r["tags"].get(T.CALIBRATION_VERSION): r for r in data.runs(scenario, T.STEP, T.RECALIBRATE)}
    calibrations = []
    for cal in reversed(data.calibrations(scenario)):
        checks = [{"path": p, **c} for p, c in sorted((cal.get("check") or {}).items())]
        calibrations.append(
            {
                "version": cal.get("version"),
                "created": cal.get("created"),
                "checks": checks,
                "run": cal_runs.get(cal.get("version")),
                "skipped": _not_fitted(cal),
                "outcomes": [{"field": f, **x} for f, xs in (cal.get("outcomes") or {}).items() for x in xs],
            }
        )
    outcomes = [
        {
            "when": when(r["start_ms"]),
            "run_id": r["run_id"],
            "drifted": r["metrics"].get("outcome.drifted") == 1,
            "onset": r["metrics"].get("outcome.onset") == 1,
            "min_p": r["metrics"].get("outcome.min_p"),
            "max_effect": r["metrics"].get("outcome.max_abs_effect"),
        }
        for r in outcome_runs
    ]
    exploration = [
        {
            "when": when(r["start_ms"]),
            "run_id": r["run_id"],
            "explored_share": r["metrics"].get("exploration_explored_share"),
            "cost_share": r["metrics"].get("exploration_cost_share"),
            "return_chosen": r["metrics"].get("exploration_return_chosen"),
            "return_all": r["metrics"].get("exploration_return_all"),
        }
        for r in data.runs(scenario, T.STEP, T.CAPTURE)
        if "exploration_explored_share" in r["metrics"]
    ][-last:]
    return {
        "runs": [{**r, "when": when(r["start_ms"])} for r in runs],
        "table": table,
        "threshold": threshold,
        "min_effect": min_effect,
        "calibrations": calibrations,
        "outcomes": outcomes,
        "exploration": exploration,
    }


def _not_fitted(cal: dict[str, Any]) -> list[tuple[str, str]]:
    """The fields a calibration left at their declared distribution, as (path, reason) pairs."""
    fit = cal.get("fit")
    skipped = fit.get("skipped") if isinstance(fit, dict) else None
    if isinstance(skipped, dict):
        return [(str(k), "" if v is None else str(v)) for k, v in sorted(skipped.items(), key=lambda kv: str(kv[0]))]
    if isinstance(skipped, (list, tuple)):
        return [(str(k), "") for k in skipped]
    return [(str(skipped), "")] if skipped else []


def rewards(data: ProjectData, scenario: str) -> dict[str, Any]:
    """The pack's reward functions with their registry versions and stress-test verdicts."""
    registered = data.model_versions(scenario, "reward_fn")
    stress = data.runs(scenario, T.STEP, T.STRESS_TEST)
    signals = signal_rows(data, scenario)
    out = []
    for fn in data.reward_functions(scenario):
        versions = [v for v in registered if v["tags"].get(T.VERSION.SHA256) == fn["sha256"]]
        verdicts = [
            {
                "when": when(r["start_ms"]),
                "verdict": r["tags"].get(T.STRESS_VERDICT, "?"),
                "run_id": r["run_id"],
                "policy_version": r["params"].get("policy_version") or "—",
            }
            for r in reversed(stress)
            if r["params"].get("reward_sha256") == fn["sha256"]
        ]
        out.append({**fn, "registry": versions, "verdicts": verdicts, "signals": signals.get(fn["label"], [])})
    return {"functions": out}


def reward_diff(data: ProjectData, scenario: str, a: str, b: str) -> dict[str, Any]:
    fns = {f["label"]: f for f in data.reward_functions(scenario)}
    for label in (a, b):
        if label not in fns:
            raise NotFound(f"scenario {scenario} has no reward function {label!r} (it has {', '.join(sorted(fns))})")
    fa, fb = fns[a], fns[b]
    lines = []
    for line in difflib.unified_diff(
        fa["source"].splitlines(), fb["source"].splitlines(), f"reward_{a}.py", f"reward_{b}.py", n=3, lineterm=""
    ):
        kind = (
            "head"
            if line.startswith(("---", "+++"))
            else "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "ctx"
        )
        lines.append({"kind": kind, "text": line})
    refs_a, refs_b = {r["ref"] for r in fa["rule_refs"]}, {r["ref"] for r in fb["rule_refs"]}
    return {
        "a": fa,
        "b": fb,
        "lines": lines,
        "refs_added": sorted(refs_b - refs_a),
        "refs_removed": sorted(refs_a - refs_b),
        "labels": sorted(fns),
    }

"""Registry views of the console: promotions and gates, drift and calibration, reward functions.

Each function turns what :class:`rlops.console.data.ProjectData` reads from MLflow and storage
into the plain dicts the templates render; a name that matches nothing raises
:class:`rlops.console.service.NotFound`.
"""

from __future__ import annotations

import difflib
import re
from datetime import datetime, timezone
from typing import Any

from rlops.pipeline_steps.infra import tags as T
from rlops.console.data import ProjectData
from rlops.console.service import NotFound

RUN_ID_RE = re.compile(r"^[0-9a-f]{32}$")
LINEAGE = (("reward function", "reward_fn"), ("reward fn sha256", "reward_fn_sha256"),
           ("reward fn model version", "reward_fn_model_version"), ("reward model", "reward_model_version"),
           ("calibration", "calibration_version"), ("data version", "data_version"), ("mode", "mode"),
           ("parent champion", "parent_champion"))


def when(ms: int | float | None) -> str:
    if not ms:
        return "—"
    return datetime.fromtimestamp(float(ms) / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _gates(data: ProjectData, scenario: str, run: dict[str, Any]) -> list[dict[str, Any]]:
    table = data.run_artifact_json(scenario, run["run_id"], "gates.json") or {"columns": [], "data": []}
    return [dict(zip(table["columns"], row)) for row in table["data"]]


def promotion(data: ProjectData, scenario: str) -> dict[str, Any]:
    """Versions with lineage and roll-out state, evaluations with their gates, events over time."""
    versions = data.model_versions(scenario, "policy")
    evaluations = []
    for run in reversed(data.runs(scenario, T.STEP, T.EVALUATE)):
        gates = _gates(data, scenario, run)
        evaluations.append({**run, "when": when(run["start_ms"]), "candidate": run["tags"].get(T.CANDIDATE, "?"),
                            "baseline": run["tags"].get(T.BASELINE, "?"), "passed": run["tags"].get(T.PASSED) == "true",
                            "segments": [g for g in gates if str(g.get("gate", "")).startswith("segment:")],
                            "gates": gates})
    events: list[dict[str, Any]] = []
    for e in evaluations:
        events.append({"ts": e["start_ms"], "what": f"evaluation of v{e['candidate']} vs {e['baseline']}: "
                       + ("all gates pass" if e["passed"] else "gate(s) failed"), "run_id": e["run_id"]})
    for v in versions:
        t = v["tags"]
        events.append({"ts": v["created_ms"], "what": f"v{v['version']} registered ({t.get('mode', '?')} training)",
                       "run_id": v["run_id"]})
        if t.get("promoted_at"):
            ms = datetime.fromisoformat(t["promoted_at"]).timestamp() * 1000
            events.append({"ts": ms, "what": f"v{v['version']} promoted to champion", "run_id": None})
        if t.get(T.ROLLED_BACK) == "true":
            events.append({"ts": None, "what": f"v{v['version']} rolled back (champion moved back to previous)",
                           "run_id": None})
    events.sort(key=lambda e: -(e["ts"] or 0))
    stages = list(data.section(scenario, "evaluate").rollout_stages)
    rows = [{**v, "when": when(v["created_ms"]), "lineage": [(label, v["tags"].get(key)) for label, key in LINEAGE],
             "traffic": v["tags"].get("traffic_fraction"), "eval_run_id": v["tags"].get("eval_run_id"),
             "stress": v["tags"].get("stress_test"), "rolled_back": v["tags"].get(T.ROLLED_BACK) == "true"}
            for v in versions]
    champion = next((r for r in rows if "champion" in r["aliases"]), None)
    return {"versions": rows, "evaluations": evaluations, "events": [{**e, "when": when(e["ts"])} for e in events],
            "stages": stages, "champion": champion}


def evaluation(data: ProjectData, scenario: str, run_id: str) -> dict[str, Any]:
    if not RUN_ID_RE.match(run_id):
        raise NotFound(f"{run_id!r} is not an MLflow run id")
    run = next((r for r in data.runs(scenario, T.STEP, T.EVALUATE) if r["run_id"] == run_id), None)
    if run is None:
        raise NotFound(f"no evaluation run {run_id} in the {scenario} experiment")
    t = run["tags"]
    summary = data.evaluation_report(scenario, t.get("run_key", ""), t.get("candidate", "")) or {}
    cand, champ = summary.get("candidate_summary") or {}, summary.get("champion_summary") or {}
    metrics = [{"metric": k, "candidate": cand.get(k), "champion": champ.get(k)} for k in sorted(set(cand) | set(champ))]
    return {"run": run, "when": when(run["start_ms"]), "candidate": t.get("candidate"), "baseline": t.get("baseline"),
            "passed": t.get("passed") == "true", "gates": _gates(data, scenario, run), "params": run["params"],
            "metrics": metrics, "notes": summary.get("notes") or []}


def drift(data: ProjectData, scenario: str, last: int = 12) -> dict[str, Any]:
    """Per-field drift effect and p-value of the last ``last`` drift runs, and each calibration."""
    cfg = data.section(scenario, "drift")
    threshold, min_effect = cfg.threshold, cfg.min_effect
    runs = data.runs(scenario, T.STEP, T.DRIFT)[-last:]
    fields = sorted({k.split("/", 1)[1] for r in runs for k in r["metrics"] if k.startswith("drift_effect/")})
    table = []
    for f in fields:
        cells = []
        for r in runs:
            e, p = r["metrics"].get(f"drift_effect/{f}"), r["metrics"].get(f"drift_p/{f}")
            cells.append({"effect": e, "p": p, "drifted": e is not None and p is not None and p < threshold
                          and e >= min_effect})
        table.append({"field": f, "cells": cells, "series": [c["effect"] for c in cells]})
    cal_runs = {r["tags"].get(T.CALIBRATION_VERSION): r for r in data.runs(scenario, T.STEP, T.RECALIBRATE)}
    calibrations = []
    for cal in reversed(data.calibrations(scenario)):
        checks = [{"path": p, **c} for p, c in sorted((cal.get("check") or {}).items())]
        calibrations.append({"version": cal.get("version"), "created": cal.get("created"), "checks": checks,
                             "run": cal_runs.get(cal.get("version")), "skipped": (cal.get("fit") or {}).get("skipped")})
    return {"runs": [{**r, "when": when(r["start_ms"])} for r in runs], "table": table, "threshold": threshold,
            "min_effect": min_effect, "calibrations": calibrations}


def rewards(data: ProjectData, scenario: str) -> dict[str, Any]:
    """The pack's reward functions with their registry versions and stress-test verdicts."""
    registered = data.model_versions(scenario, "reward_fn")
    stress = data.runs(scenario, T.STEP, T.STRESS_TEST)
    out = []
    for fn in data.reward_functions(scenario):
        versions = [v for v in registered if v["tags"].get("sha256") == fn["sha256"]]
        verdicts = [{"when": when(r["start_ms"]), "verdict": r["tags"].get(T.STRESS_VERDICT, "?"), "run_id": r["run_id"],
                     "policy_version": r["params"].get("policy_version") or "—"}
                    for r in reversed(stress) if r["params"].get("reward_sha256") == fn["sha256"]]
        out.append({**fn, "registry": versions, "verdicts": verdicts})
    return {"functions": out}


def reward_diff(data: ProjectData, scenario: str, a: str, b: str) -> dict[str, Any]:
    fns = {f["label"]: f for f in data.reward_functions(scenario)}
    for label in (a, b):
        if label not in fns:
            raise NotFound(f"scenario {scenario} has no reward function {label!r} (it has {', '.join(sorted(fns))})")
    fa, fb = fns[a], fns[b]
    lines = []
    for line in difflib.unified_diff(fa["source"].splitlines(), fb["source"].splitlines(), f"reward_{a}.py",
                                     f"reward_{b}.py", n=3, lineterm=""):
        kind = ("head" if line.startswith(("---", "+++")) else "hunk" if line.startswith("@@") else
                "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx")
        lines.append({"kind": kind, "text": line})
    refs_a, refs_b = {r["ref"] for r in fa["rule_refs"]}, {r["ref"] for r in fb["rule_refs"]}
    return {"a": fa, "b": fb, "lines": lines, "refs_added": sorted(refs_b - refs_a),
            "refs_removed": sorted(refs_a - refs_b), "labels": sorted(fns)}

"""The console's off-policy views on hand-made stores and runs (seconds, no demo): the shadow page's
agreement and estimate on a tiny hand-checkable trace store, its empty state, and the evaluation
page's off-policy section for a judged gate (with a sim-to-real gap) and for a skipped one."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from rlops.registry import tags as T

S = "credit_approval"
SERVED = f"{S}-policy/1"
SHADOW_A, SHADOW_B = f"{S}-policy/2", f"{S}-policy/3"

# (episode, served action, propensity, reward, shadow action): one-step episodes shadowed by A.
# Greedy target: ρ = 1[shadow == served] / propensity → w = 2, 2, 0, 2, 0 (a6: no shadow decision).
ROWS_A = [
    ("a1", "approve", 0.5, 1.0, "approve"),
    ("a2", "approve", 0.5, 2.0, "approve"),
    ("a3", "approve", 1.0, 5.0, "reject"),
    ("a4", "reject", 0.5, 3.0, "reject"),
    ("a5", "reject", 1.0, 3.0, "approve"),
    ("a6", "approve", 1.0, 0.0, None),
]
PDIS = (2 * 1 + 2 * 2 + 0 + 2 * 3 + 0) / 5  # 2.4: mean of w·r over the 5 complete shadowed episodes
WIS = (2 * 1 + 2 * 2 + 2 * 3) / (2 + 2 + 2)  # 2.0: Σ w·r / Σ w
LOGGED = (1 + 2 + 5 + 3 + 3) / 5  # 2.8
ESS = 6**2 / (3 * 2**2)  # (Σ w)² / Σ w² = 3


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


@pytest.fixture(params=["duckdb"])
def home(rlops_home: Path, request: pytest.FixtureRequest) -> Path:
    """A project home whose off-policy settings let a handful of episodes be judged (trace store
    engine: the parameter)."""
    path = rlops_home / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["ope"] = {**(params.get("ope") or {}), "min_episodes": 2, "min_ess": 1, "bootstrap_samples": 200}
    params.setdefault("trace_store", {})["engine"] = request.param
    path.write_text(yaml.safe_dump(params))
    return rlops_home


def _client() -> Any:
    from fastapi.testclient import TestClient

    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    return TestClient(create_app(ProjectData(registry_ttl_s=0.0), mlflow_ui="http://127.0.0.1:5000"))


def _write_traces(rows: list[dict[str, Any]]) -> None:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.trace_store.store import write_trace_partitions

    ctx = StepContext.create(S, "20261201T0900")
    t0 = datetime(2026, 12, 1, 9, 5, tzinfo=UTC)
    df = pd.DataFrame(rows)
    df["scenario"] = S
    df["ts"] = [t0 + timedelta(seconds=i) for i in range(len(df))]
    df["trace_id"] = [f"{e}-{s}" for e, s in zip(df["episode_id"], df["step"])]
    df["source"] = "live"
    df["logp"] = [math.log(p) for p in df["propensity"]]
    for col in ("shadow_policy_version", "shadow_action", "shadow_served_logp"):
        if col not in df:
            df[col] = None
    assert write_trace_partitions(ctx.storage, df, ctx.traces.trace_uri, ctx.run_key)


def _row(
    episode: str,
    action: str,
    p: float,
    r: float,
    shadow: str | None,
    shadow_action: str | None,
    step: int = 0,
    done: bool = True,
) -> dict[str, Any]:
    return {
        "episode_id": episode,
        "step": step,
        "action": action,
        "propensity": p,
        "reward_total": r,
        "done": done,
        "policy_version": SERVED,
        "shadow_policy_version": shadow,
        "shadow_action": shadow_action,
        "shadow_served_logp": math.log(0.9) if shadow_action is not None else None,
    }


@pytest.mark.parametrize("home", ["duckdb", "pandas"], indirect=True)
def test_shadow_agreement_and_estimate_by_hand(home: Path) -> None:
    rows = [_row(e, a, p, r, SHADOW_A, s) for e, a, p, r, s in ROWS_A]
    # B shadowed one two-step episode: agreement 1 of 2, and too few episodes for an estimate
    rows += [
        _row("b1", "approve", 1.0, 1.0, SHADOW_B, "approve", done=False),
        _row("b1", "reject", 1.0, 1.0, SHADOW_B, "approve", step=1),
    ]
    rows += [_row("u1", "approve", 1.0, 1.0, None, None)]  # not shadowed: counted nowhere
    _write_traces(rows)
    client = _client()
    assert f'href="/s/{S}/shadow"' in client.get("/").text  # linked from the overview
    r = client.get(f"/s/{S}/shadow")
    assert r.status_code == 200 and "No shadow decisions" not in r.text
    sections = dict(re.findall(r'<section class="shadow" data-shadow="([^"]+)">(.*?)</section>', r.text, re.DOTALL))
    assert list(sections) == [SHADOW_A, SHADOW_B]  # most decisions first
    a = _text(sections[SHADOW_A])
    assert "5 decisions" in a and "agreement with the served decisions 60.0% (3 of 5)" in a
    assert "1 without a shadow decision" in a and f"beside {SERVED} (6)" in a
    rows_a = dict(re.findall(r'<tr data-action="([^"]+)">(.*?)</tr>', sections[SHADOW_A], re.DOTALL))
    assert _text(rows_a["approve"]) == "approve 3 2 66.7% reject (1)"
    assert _text(rows_a["reject"]) == "reject 2 1 50.0% approve (1)"
    est = dict(re.findall(r'<tr data-estimator="(\w+)">(.*?)</tr>', sections[SHADOW_A], re.DOTALL))
    assert _text(est["pdis"]).startswith(f"PDIS {PDIS:g} [") and _text(est["wis"]).startswith(f"WIS {WIS:g} [")
    assert _text(est["logged"]).startswith(f"logged policy {LOGGED:g}")
    assert (
        f"effective sample size {ESS:g}" in a
        and "Left out of the estimate: 1 episode on" in a
        and "candidate as serving (probability 1 on its own choice" in a
    )
    b = _text(sections[SHADOW_B])
    assert "agreement with the served decisions 50.0% (1 of 2)" in b
    assert "No estimate: 1 complete live episodes shadowed at every step (ope.min_episodes 2)" in b
    # the figures come from the view the page renders: the same numbers, unrounded
    from rlops.console.data import ProjectData
    from rlops.console.service import TraceViews

    view = TraceViews(ProjectData()).shadow(S)
    cand = {c["version"]: c for c in view["candidates"]}
    ope = {e["key"]: e for e in cand[SHADOW_A]["ope"]["estimates"]}
    assert ope["pdis"]["value"] == pytest.approx(PDIS) and ope["wis"]["value"] == pytest.approx(WIS)
    assert cand[SHADOW_A]["ope"]["ess"] == pytest.approx(ESS)


def test_no_shadow_rows_is_a_clear_empty_state(home: Path) -> None:
    _write_traces([_row("u1", "approve", 1.0, 1.0, None, None), _row("u2", "reject", 1.0, 0.0, None, None)])
    r = _client().get(f"/s/{S}/shadow")
    assert r.status_code == 200
    text = _text(r.text)
    assert 'id="shadow-empty"' in r.text and "No shadow decisions were logged" in text
    assert 'shadow="challenger"' in text and "PolicyClient(" in text


def _evaluation_run(
    metrics: dict[str, float], params: dict[str, str], tags: dict[str, str], gate: Any, *more: Any
) -> str:
    """An evaluation run as ``evaluate_report.record_evaluation`` logs it: tags, params, metrics and ``gates.json``."""
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.gate_table import gate_frame

    ctx = StepContext.create(S, "20261201T0900")
    client = ctx.tracker.client
    exp = ctx.tracker.experiment_id_for(S)
    run = client.create_run(
        exp,
        tags={
            T.STEP: T.EVALUATE,
            T.SCENARIO: S,
            T.RUN_KEY: ctx.run_key,
            T.CANDIDATE: "2",
            T.BASELINE: "champion v1",
            T.PASSED: "true",
            **tags,
        },
    )
    rid = run.info.run_id
    for k, v in params.items():
        client.log_param(rid, k, v)
    for k, v in metrics.items():
        client.log_metric(rid, k, v)
    table = gate_frame([gate, *more])
    client.log_dict(
        rid,
        {"columns": list(table.columns), "data": table.astype(object).where(table.notna(), None).values.tolist()},
        "gates.json",
    )
    client.set_terminated(rid)
    return str(rid)


def test_the_evaluation_page_shows_the_off_policy_estimates_and_the_gap(home: Path) -> None:
    from rlops.pipeline_steps.promotion.ope import Estimate, OPEConfig
    from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row, ope_metrics, ope_run_fields
    from rlops.pipeline_steps.promotion.ope_value import OPEResult

    cfg = OPEConfig()
    res = OPEResult(
        episodes=812,
        estimates={
            "pdis": Estimate("pdis", 1.21, 1.02, 1.4, 0.1, "normal"),
            "wis": Estimate("wis", 1.18, 1.05, 1.33, 0.07, "bootstrap"),
            "dr": Estimate("dr", 1.25, 1.11, 1.39, 0.07, "normal"),
        },
        logged_return=1.1,
        ess=240.0,
        agreement=0.83,
    )
    gate = ope_gate_row(res, cfg)
    params, tags = ope_run_fields([gate], cfg)
    # the sandbox says 1.75: beyond DR's upper bound by more than ope.gap_threshold of the logged value
    metrics = ope_metrics(res, 1.75, cfg)
    assert metrics["ope_sim_to_real_gap"] == pytest.approx(0.5)
    rid = _evaluation_run(metrics, params, tags, gate)
    page = _client().get(f"/s/{S}/evaluation/{rid}").text
    section = re.search(r'<section id="ope" data-state="pass">(.*?)</section>', page, re.DOTALL).group(1)
    text = _text(section)
    assert "Off-policy evaluation on live traffic" in text and 'id="ope-state" class="pass">pass' in section
    est = {k: _text(v) for k, v in re.findall(r'<tr data-estimator="(\w+)">(.*?)</tr>', section, re.DOTALL)}
    assert est["pdis"].startswith("PDIS 1.21 [1.02, 1.4]") and est["wis"].startswith("WIS 1.18 [1.05, 1.33]")
    assert est["dr"].startswith("DR 1.25 [1.11, 1.39]") and est["logged"].startswith("logged policy 1.1")
    assert est["sandbox"].startswith("sandbox 1.75") and "sandbox − DR +0.5" in est["sandbox"]
    assert "95% interval (normal; WIS bootstrap)" in text
    assert "812 complete live episodes" in text and "effective sample size 240" in text and "83.0%" in text
    assert "Sim-to-real gap: the sandbox estimates 1.75, live traffic (DR) 1.25 — a gap of +0.5" in text
    assert "DR's direct method: sandbox" in text


def test_the_evaluation_page_shows_whether_the_sandbox_earned_trust(home: Path) -> None:
    from rlops.common.params_operations import OpeParams
    from rlops.pipeline_steps.promotion.evidence import trust_row
    from rlops.pipeline_steps.promotion.ope import Estimate, OPEConfig
    from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row, ope_metrics, ope_run_fields
    from rlops.pipeline_steps.promotion.ope_value import OPEResult

    cfg = OPEConfig()
    dr = Estimate("dr", 0.0051, 0.004, 0.0062, 0.0006, "normal")
    res = OPEResult(episodes=9000, estimates={"dr": dr}, logged_return=0.005, ess=900.0)
    gate = ope_gate_row(res, cfg)
    params, tags = ope_run_fields([gate], cfg)
    # the rule engine earns 0.034 in a sandbox fitted on a handful of clicks, 0.005 on logged traffic
    trust = trust_row(0.034, 0.005, 0.0007, 0.07, "rule engine", OpeParams())
    assert trust.skipped
    metrics = {**ope_metrics(res, 0.04, cfg), "ope_incumbent_sandbox_value": 0.034, "ope_sim_to_real_ratio": 6.8}
    rid = _evaluation_run(metrics, params, tags, gate, trust)
    page = _client().get(f"/s/{S}/evaluation/{rid}").text
    est = {k: _text(v) for k, v in re.findall(r'<tr data-estimator="([\w-]+)">(.*?)</tr>', page, re.DOTALL)}
    assert est["incumbent-sandbox"].startswith("incumbent in the sandbox 0.034")
    assert "sim-to-real ratio 6.8" in est["incumbent-sandbox"]
    trust_text = _text(re.search(r'<p id="sandbox-trust" class="skipped">(.*?)</p>', page, re.DOTALL).group(1))
    assert "sandbox:trust" in trust_text and "sim-to-real ratio 6.8" in trust_text
    assert "by more than 25% of its scale" in est["logged"]


def test_a_skipped_off_policy_gate_shows_its_reason(home: Path) -> None:
    from rlops.pipeline_steps.promotion.ope import OPEConfig
    from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row, ope_metrics, ope_run_fields
    from rlops.pipeline_steps.promotion.ope_value import OPEResult

    cfg = OPEConfig()
    reason = "12 complete live episodes in the window (ope.min_episodes 200)"
    res = OPEResult(episodes=12, skipped=reason)
    gate = ope_gate_row(res, cfg)
    params, tags = ope_run_fields([gate], cfg)
    assert tags == {T.OPE_STATE: "skipped", T.OPE_REASON: reason} and params["ope.ci"] == "normal"
    rid = _evaluation_run(ope_metrics(res, 1.5, cfg), params, tags, gate)
    page = _client().get(f"/s/{S}/evaluation/{rid}").text
    section = re.search(r'<section id="ope" data-state="skipped">(.*?)</section>', page, re.DOTALL).group(1)
    assert _text(section).count(f"Skipped: {reason}") == 1
    assert 'id="ope-estimates"' not in section and "Sim-to-real gap" not in section
    assert "12 complete live episodes" in _text(section) and "effective sample size" not in section
    assert 'data-gate="ope:dr" data-state="skipped"' in page  # the gate table says the same

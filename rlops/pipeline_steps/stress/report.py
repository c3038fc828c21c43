"""The report of ``rlops stress``: the verdict with its reasons and warnings (:func:`report_dict`,
the JSON written and logged) and the HTML page of it (:func:`render_html`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rlops.pipeline_steps.infra.html import html_page, html_table

if TYPE_CHECKING:
    from rlops.pipeline_steps.stress.checks import RewardStress
    from rlops.pipeline_steps.stress.probes import ProbeResult
    from rlops.pipeline_steps.stress.step import PolicyStressRow


def report_dict(reward: RewardStress, policy: list[PolicyStressRow] | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The report's JSON: the verdict, why it failed, what is worth a look, and every result."""
    passed = reward.passed and all(r.passed for r in policy or [])
    reasons = [f.message for f in reward.findings]
    reasons += [
        f"gaming probe '{p.name}' out-earns the honest baseline '{p.baseline}' by {p.advantage:.4g} "
        f"(95% interval {p.advantage_low:.4g} … {p.advantage_high:.4g})"
        for p in reward.probes
        if not p.passed
    ]
    reasons += [f"policy under '{r.scenario}': {r.reason}" for r in policy or [] if not r.passed]
    rules_at = {f" at {r['at']}": r["baselines"].get("rules", float("nan")) for r in reward.signal_range}

    def rules_return(p: ProbeResult) -> float:  # a probe at a signal's end is paired with the rules there
        at = next((k for k in rules_at if p.name.endswith(k)), None)
        return rules_at[at] if at is not None else reward.baselines.get("rules", float("nan"))

    warnings = [
        f"gaming probe '{p.name}' earns more than the rule engine ({p.mean_return:.4g} vs "
        f"{rules_return(p):.4g}) though less than '{p.baseline}': either the rule "
        "engine is weak in those states or the reward overpays that behaviour — worth a look"
        for p in reward.probes
        if p.passed and p.beats_rules
    ]
    return {
        "passed": passed,
        "verdict": "pass" if passed else "fail",
        "reasons": reasons,
        "warnings": warnings,
        "meta": meta,
        "reward": reward.to_dict(),
        "policy": [asdict(r) for r in policy] if policy is not None else None,
    }


def render_html(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    rw, meta = report["reward"], report["meta"]
    verdict = "PASS" if report["passed"] else "FAIL"
    parts = [
        f"<p class='verdict'>{verdict}</p><p>Scenario <b>{meta.get('scenario')}</b>, reward function "
        f"<b>{rw['reward_fn']}</b> (sha256 {rw['reward_fn_sha256'][:12]}…), bound ±{rw['bound']:g}"
        + (f", policy version <b>{meta['policy_version']}</b>" if meta.get("policy_version") else "")
        + ".</p>"
    ]
    if report["reasons"]:
        parts.append("<h2>Why it failed</h2><ul>" + "".join(f"<li>{_esc(r)}</li>" for r in report["reasons"]) + "</ul>")
    if report.get("warnings"):
        parts.append("<h2>Worth a look</h2><ul>" + "".join(f"<li>{_esc(w)}</li>" for w in report["warnings"]) + "</ul>")
    cols = [
        "action",
        "states",
        "legal",
        "masked",
        "non_finite",
        "out_of_bounds",
        "sum_mismatch",
        "raised",
        "clipped",
        "max_abs_reward",
    ]
    bad = {
        i: "fail"
        for i, c in enumerate(rw["coverage"])
        if c["non_finite"] or c["out_of_bounds"] or c["sum_mismatch"] or c["raised"]
    }
    parts.append(
        "<h2>Edge states per action</h2><p>Nominal and harsh simulation together; masked actions are "
        "executed as no-ops.</p>" + html_table(rw["coverage"], cols, bad)
    )
    if rw["findings"]:
        rows = [{**f, "example": json.dumps(f["example"])[:400] if f.get("example") else None} for f in rw["findings"]]
        parts.append(
            "<h2>Findings</h2>"
            + html_table(
                rows,
                ["check", "action", "sim", "component", "count", "message", "example"],
                {i: "fail" for i in range(len(rows))},
            )
        )
    if rw["probes"]:
        parts.append(
            "<h2>Gaming probes</h2><p>Honest baselines: "
            + ", ".join(f"{k} {v:.4g}" for k, v in rw["baselines"].items())
            + "</p>"
            + html_table(
                rw["probes"],
                [
                    "name",
                    "mean_return",
                    "baseline",
                    "baseline_return",
                    "advantage",
                    "advantage_low",
                    "advantage_high",
                    "beats_rules",
                    "passed",
                ],
                {
                    i: ("fail" if not p["passed"] else "warn" if p["beats_rules"] else "pass")
                    for i, p in enumerate(rw["probes"])
                },
            )
        )
    if report.get("policy"):
        parts.append(
            "<h2>Policy under perturbed simulation</h2>"
            + html_table(
                report["policy"],
                [
                    "scenario",
                    "profile",
                    "mean_return",
                    "return_floor",
                    "completion_rate",
                    "completion_floor",
                    "human_takeover_rate",
                    "mean_handling_ms",
                    "passed",
                    "reason",
                ],
                {i: "pass" if r["passed"] else "fail" for i, r in enumerate(report["policy"])},
            )
        )
    if rw.get("constraints"):
        parts.append(
            "<h2>Rule constraints</h2><p>Transitions of the edge states that break a rule's constraint, "
            "and how many of them the components citing the rule pay for.</p>"
            + html_table(
                rw["constraints"],
                ["rule", "constraint", "components", "judged", "violations", "rewarded", "passed"],
                {i: "pass" if c["passed"] else "fail" for i, c in enumerate(rw["constraints"])},
            )
        )
    if rw.get("signal_range"):
        parts.append(
            "<h2>Business signals over their declared range</h2><p>The checks and gaming probes above, "
            "run again with the signal-driven weights at each end of their range.</p>"
            + html_table(
                [
                    {**r, "signals": json.dumps(r["signals"]), "weights": json.dumps(r["weights"])}
                    for r in rw["signal_range"]
                ],
                ["signals", "weights", "findings", "probes_failed"],
                {
                    i: "fail" if r["findings"] or r["probes_failed"] else "pass"
                    for i, r in enumerate(rw["signal_range"])
                },
            )
        )
    vis = [{"field": k, **v} for k, v in rw["visibility"].items()]
    if vis:
        parts.append("<h2>Visibility coverage</h2>" + html_table(vis, ["field", "visible", "hidden"]))
    return html_page(f"Stress test — {meta.get('scenario')}", "".join(parts))


def _esc(text: str) -> str:
    import html

    return html.escape(text)

"""Benchmark: the loop over 48 simulated hours (credit pack) with the six standard events —
the applicant population ages at hour 10, the credit bureau's latency triples at hour 20, applicants
aged 60 and over start defaulting 2.5 times as often at hour 24 (an outcome event), the bureau's
error rate jumps at hour 30, the business scores with reward_v2 from hour 34 (a rule change), a
deliberately worse candidate is offered at hour 40 — running the pack's DAG definitions (``dags/``,
``<dag>__credit_approval``) through ``dag.test()`` at each due interval, plus the runs they trigger
(:mod:`rlops.timeline.simulate`).

Prints the hour table, the load average at the start and the end, and as the LAST line one JSON
object: ``detection_delay_h``, ``false_alarms``, ``emergency_retrains``, ``bad_candidate_promoted``,
``champion_regressions``, ``rows_lost``, per event ``events.<label>.detection_delay_h`` and
``recovery_h`` (hours from onset until the live return is back to ≥ 95 % of the world-optimal
reference's on the same episodes; bar ≤ 6 h after outcomes arrive), ``mean_regret_share``
((reference − served) / (reference − rules) averaged over the hours after the first promotion; bar
≤ 0.05), where the reference is the better of the pack's oracle and, after the reward-rule change, a
policy trained in that world with the product's defaults (``reference_trained``: its budget, steps
and wall seconds; :mod:`rlops.timeline.regret`), ``promotions``,
``rollbacks``, ``stages_advanced``, ``ab_gates_run`` (bar: > 0), ``promotion_to_agent_s`` (the longest
simulated time from an alias move to the policy client serving it; bar: <= 60 s), ``retrains_skipped``,
``dag_runs``, ``wall_s`` (bar: < 30 min on 2 cores), ``cpu_s`` (the process's CPU seconds: on a shared
machine ``wall_s`` grows with the load, this does not), the policy client's ``fallback_episodes`` and
``challenger_episodes`` and ``fallback_reasons`` (decisions per fallback code), the PNG path. With
``--late-outcome loan_outcome`` the loan outcome arrives ``--outcome-delay-hours`` after each decision
through ``Tracer.outcome`` (:mod:`rlops.timeline.late_outcomes`), and ``late_outcomes`` counts them.

    python bench/loop_days.py [--hours 48] [--events FILE] [--workdir DIR] [--late-outcome loan_outcome]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlops.timeline.events import DEFAULT_EVENTS_48H, load_events, parse_events  # noqa: E402
from rlops.timeline.report import table  # noqa: E402
from rlops.timeline.simulate import run_timeline  # noqa: E402
from rlops.timeline.world import TimelineConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=int, default=48)
    ap.add_argument("--events", default=None, help="events YAML (default: the six standard events)")
    ap.add_argument("--episodes-per-tick", type=int, default=TimelineConfig.episodes_per_tick)
    ap.add_argument("--workdir", default=None)
    ap.add_argument(
        "--late-outcome",
        default=None,
        metavar="COMPONENT",
        help="a reward component that arrives later as each episode's outcome (loan_outcome)",
    )
    ap.add_argument("--outcome-delay-hours", type=float, default=TimelineConfig.outcome_delay_hours)
    args = ap.parse_args()
    load_start = os.getloadavg()
    events = load_events(args.events) if args.events else parse_events(DEFAULT_EVENTS_48H)
    res = run_timeline(
        TimelineConfig(
            hours=args.hours,
            episodes_per_tick=args.episodes_per_tick,
            late_outcome=args.late_outcome,
            outcome_delay_hours=args.outcome_delay_hours,
        ),
        events,
        args.workdir,
        say=lambda s: print(s, flush=True),
    )
    load_end = os.getloadavg()
    print(table(res["hours"], res["metrics"]))
    m = res["metrics"]
    out = {
        k: m[k]
        for k in (
            "detection_delay_h",
            "false_alarms",
            "emergency_retrains",
            "drift_events",
            "bad_candidate_promoted",
            "champion_regressions",
            "rows_lost",
            "wall_s",
            "cpu_s",
        )
    }
    drift_events = [e for e in events if e.drift]
    outcome_events = [e for e in events if e.outcome]
    delays = dict(zip([e.label() for e in drift_events], m["detection_delay_h"]))
    delays.update(zip([e.label() for e in outcome_events], m.get("outcome_detection_delay_h") or []))
    recovery = m.get("recovery_h") or {}
    out["events"] = {
        e.label(): {"detection_delay_h": delays.get(e.label()), "recovery_h": recovery.get(e.label())}
        for e in drift_events + outcome_events
    }
    out.update(
        mean_regret_share=m.get("mean_regret_share"),
        mean_regret=m.get("mean_regret"),
        regret_share_bar=0.05,
        reference_trained=m.get("reference_trained"),
        recovery_bar_h=6,
    )
    out.update(
        hours=args.hours,
        promotions=m["promotions"],
        rollbacks=m["rolled_back"],
        stages_advanced=m["stage_moves"],
        ab_gates_run=m["ab_gates_run"],
        promotion_to_agent_s=m["promotion_to_agent_s"],
        retrains_skipped=m["retrains_skipped"],
        dag_runs=m["dag_runs"],
        fallback_episodes=m["fallback_episodes"],
        challenger_episodes=m["challenger_episodes"],
        fallback_reasons=m["fallback_reasons"],
        late_outcomes=m.get("late_outcomes"),
        png=res["png"],
        mlflow_run_id=res["run_id"],
        loadavg_start=[round(x, 2) for x in load_start],
        loadavg_end=[round(x, 2) for x in load_end],
        cpus=os.cpu_count(),
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()

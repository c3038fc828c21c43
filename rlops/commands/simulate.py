"""``rlops simulate``: the five DAGs' tasks on their schedules over simulated days, against a
production world scripted by an events file (see :mod:`rlops.pipeline_steps.orchestration.simulate`)."""

from __future__ import annotations

import argparse
import json

from rlops.commands.common_args import add_common_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run the DAGs' tasks on their schedules over simulated days, against a "
                                        "production world scripted by an events file")
    add_common_args(p, run_key=False)
    p.add_argument("--hours", type=int, default=48, help="simulated hours (default 48)")
    p.add_argument("--events", default=None, help="events YAML (default: the four standard events, spread over "
                                                  "--hours as over 48)")
    p.add_argument("--episodes-per-tick", type=int, default=None, help="production episodes per 15 minutes")
    p.add_argument("--workdir", default=None,
                   help="folder for the simulated storage and registry (default: a temporary one)")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    from rlops.common.arguments import count
    from rlops.common.config import load_params
    from rlops.pipeline_steps.orchestration.events import load_events, scaled_events
    from rlops.pipeline_steps.orchestration.simulate import TimelineConfig, run_timeline
    from rlops.pipeline_steps.orchestration.timeline_report import table
    hours = count("--hours", args.hours, maximum=24 * 60)
    events = load_events(args.events) if args.events else scaled_events(hours)
    from rlops.common.params_sources import as_params
    scenario = args.scenario or as_params(load_params()).scenario
    kw = {"episodes_per_tick": count("--episodes-per-tick", args.episodes_per_tick)} if args.episodes_per_tick else {}
    config = TimelineConfig(scenario=scenario, hours=hours, **kw)
    if args.dry_run:
        print(json.dumps({"scenario": scenario, "hours": hours, "events": [str(e) for e in events],
                          "dry_run": True}) if args.json else
              f"dry run: would simulate {hours} h of {scenario} with {len(events)} event(s)")
        return 0
    res = run_timeline(config, events, args.workdir, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "hours"}, default=str))
    else:
        print(table(res["hours"], res["metrics"]))
        print(f"report: {res['png']}\njson:   {res['json']}")
    return 0

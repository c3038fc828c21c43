"""``rlops simulate``: the five DAGs' tasks on their schedules over simulated days, against a
production world scripted by an events file (see :mod:`rlops.timeline.simulate`)."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from rlops.commands.common_args import add_common_args, print_json

#: Production episodes per 15-minute tick at most: far above a test or demo, low enough that an
#: extra zero or three is an error instead of a machine busy for days.
MAX_EPISODES_PER_TICK = 100_000
#: A dry run's metrics: the timeline is what decides them, and it writes a whole simulated project.
NOT_SIMULATED = (
    "not computed: a dry run checks the arguments and the events file only; the metrics come from "
    "running the timeline, which writes a simulated project (storage, registry, Airflow home)"
)
#: Marks a folder a timeline wrote, so a re-run may reuse it and a foreign params.yaml is never overwritten.
WORKDIR_MARK = ".rlops-timeline"


def check_workdir(path: Path) -> None:
    """``--workdir`` must be a folder that is new, empty, or an earlier timeline's: the timeline writes
    its own params.yaml and storage there, and must never overwrite a project's."""
    from rlops.common.errors import UserError

    if path.exists() and not path.is_dir():
        raise UserError(f"--workdir {path}: is a file; expected a folder for the simulated storage and registry")
    if path.is_dir() and (path / "params.yaml").exists() and not (path / WORKDIR_MARK).exists():
        raise UserError(
            f"--workdir {path}: holds a params.yaml that rlops simulate did not write; the timeline "
            "writes its own params.yaml there and would overwrite it. Pass a new or empty folder"
        )


class TimelineDefaults:
    """The defaults the command shows, as :class:`~rlops.timeline.world.TimelineConfig` has them
    (read there at parse time would import the timeline for every command)."""

    outcome_delay_hours = 1.0


def late_outcome(args: argparse.Namespace, pack_dir: Path, hours: int) -> str | None:
    """``--late-outcome``, checked: a reward component of the pack's reward functions, with a
    delay of more than 0 and less than the simulated ``hours``."""
    from rlops.common.errors import UserError

    delay = args.outcome_delay_hours
    if not (math.isfinite(delay) and 0 < delay < hours):
        raise UserError(f"--outcome-delay-hours {delay:g}: expected simulated hours above 0 and below --hours {hours}")
    if args.late_outcome is None:
        return None
    from rlops.sandbox.pack import load_pack

    pack = load_pack(pack_dir, check_liveness=False)
    names = sorted({c.name for fn in pack.reward_fns.values() for c in fn.components})
    if args.late_outcome not in names:
        raise UserError(
            f"--late-outcome {args.late_outcome!r}: not a reward component of pack {pack_dir.name} "
            f"(its components: {', '.join(names)})"
        )
    return str(args.late_outcome)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="run the DAGs' tasks on their schedules over simulated days, against a "
        "production world scripted by an events file",
        description="With --dry-run the arguments and the events file are checked (a reward module "
        "outside the pack is refused) but the timeline is not run: it writes a whole simulated "
        "project, so the dry run's metrics say 'not computed'.",
    )
    add_common_args(p, run_key=False)
    p.add_argument("--hours", type=int, default=48, help="simulated hours (default 48)")
    p.add_argument(
        "--events", default=None, help="events YAML (default: the four standard events, spread over --hours as over 48)"
    )
    p.add_argument(
        "--episodes-per-tick",
        default=None,
        help=f"production episodes per 15 minutes (at most {MAX_EPISODES_PER_TICK:,})",
    )
    p.add_argument(
        "--workdir", default=None, help="folder for the simulated storage and registry (default: a temporary one)"
    )
    p.add_argument(
        "--late-outcome",
        default=None,
        metavar="COMPONENT",
        help="a reward component the business learns late (credit_approval: loan_outcome): left out of the "
        "traced rows and sent as each episode's outcome --outcome-delay-hours after its last decision "
        "(default: every component scored at decision time)",
    )
    p.add_argument(
        "--outcome-delay-hours",
        type=float,
        default=TimelineDefaults.outcome_delay_hours,
        help="simulated hours from a decision to its late outcome (default %(default)g)",
    )
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    from rlops.commands.common_args import scenario_of
    from rlops.common.arguments import count
    from rlops.common.config import load_params, scenarios_dir
    from rlops.common.errors import UserError
    from rlops.timeline.events import (
        check_reward_modules,
        check_world,
        load_events,
        scaled_events,
    )
    from rlops.timeline.report import table
    from rlops.timeline.simulate import run_timeline
    from rlops.timeline.world import TimelineConfig

    hours = count("--hours", args.hours, maximum=24 * 60)
    per_tick = (
        count("--episodes-per-tick", args.episodes_per_tick, maximum=MAX_EPISODES_PER_TICK)
        if args.episodes_per_tick is not None
        else None
    )
    events = load_events(args.events) if args.events else scaled_events(hours)
    for e in events:  # an event that can never fire is an error, not a quiet no-op
        at = getattr(e, "at_hour", None)
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 <= at < hours:
            raise UserError(
                f"events file {args.events}: event {e.label()} has at_hour {at!r}; expected a number of "
                f"hours in [0, {hours}) (--hours {hours})"
            )
    params = load_params()
    scenario = scenario_of(args.scenario, params)[1] if args.scenario is not None else str(params.get("scenario"))
    if args.workdir is not None:
        check_workdir(Path(args.workdir))
    # an events file is data, not code: a reward module it names must be a pack author's file
    check_reward_modules(events, scenarios_dir(params) / scenario, f"events file {args.events}")
    check_world(scenarios_dir(params) / scenario, events, f"events file {args.events}")
    late = late_outcome(args, scenarios_dir(params) / scenario, hours)
    config = TimelineConfig(
        scenario=scenario, hours=hours, late_outcome=late, outcome_delay_hours=args.outcome_delay_hours
    )
    if per_tick is not None:
        config = dataclasses.replace(config, episodes_per_tick=per_tick)
    if args.dry_run:
        if args.json:
            print_json(
                {
                    "scenario": scenario,
                    "hours": hours,
                    "events": [str(e) for e in events],
                    "late_outcome": late,
                    "outcome_delay_hours": args.outcome_delay_hours if late else None,
                    "dry_run": True,
                    "metrics": NOT_SIMULATED,
                },
                None,
            )
        else:
            settles = f", {late} settling {args.outcome_delay_hours:g} h late" if late else ""
            print(f"dry run: would simulate {hours} h of {scenario} with {len(events)} event(s){settles}")
        return 0
    if args.workdir is not None:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        (Path(args.workdir) / WORKDIR_MARK).write_text("a timeline of `rlops simulate` lives here\n")
    res = run_timeline(config, events, args.workdir, say=(lambda s: None) if args.json else print)
    if args.json:
        print_json({k: v for k, v in res.items() if k != "hours"}, None)
    else:
        print(table(res["hours"], res["metrics"]))
        print(f"report: {res['png']}\njson:   {res['json']}")
    return 0

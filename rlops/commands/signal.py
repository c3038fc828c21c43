"""``rlops signal set|show``: the business signals that drive signal-driven reward weights."""

from __future__ import annotations

import argparse

from rlops.commands.common_args import print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("signal", help="business signals that move reward weights (SIGNAL_WEIGHTS)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="{set,show}")
    s = verbs.add_parser("set", help="offer a new value of a signal; a bad value is refused and recorded")
    s.add_argument("name", help="the signal, e.g. complaint_index")
    s.add_argument("value", help="a number inside the range every declaring reward module gives")
    s.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    s.add_argument("--dry-run", action="store_true", help="check the value; record nothing")
    s.set_defaults(func=cmd_set)
    w = verbs.add_parser("show", help="the value in force of each declared signal, where it is declared, its history")
    w.add_argument("name", nargs="?", help="one signal (default: every declared one)")
    w.add_argument("--last", type=int, default=10, help="offers of the history shown (default 10)")
    w.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    w.set_defaults(func=cmd_show)


def cmd_set(args: argparse.Namespace) -> int:
    from rlops.common.config import load_params
    from rlops.pipeline_steps.infra.signal_store import set_signal

    result = set_signal(load_params(), args.name, args.value, by="cli", dry_run=args.dry_run)
    if args.json:
        print_json(result.as_dict())
    else:
        value = result.in_force.value
        print(f"signal {args.name} = {value:g}" + (" (dry run: not recorded)" if args.dry_run else ""))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rlops.common.config import load_params
    from rlops.pipeline_steps.infra.signal_store import show_signals

    result = show_signals(load_params(), args.name, max(0, args.last))
    if args.json:
        print_json(result.as_dict())
        return 0
    if not result.signals:
        print("no reward module declares a signal (SIGNAL_WEIGHTS)")
    for s in result.signals:
        r = s.reading
        set_at = f" since {r.set_at}" if r.set_at else ""
        print(f"{r.name} = {r.value:g} ({r.status}{set_at}){' — ' + r.note if r.note else ''}")
        for d in s.declared_by:
            w = d.declaration.weight
            print(
                f"  {d.declaration.scenario} reward_{d.declaration.reward_fn}.py: {w.objective} weight "
                f"{d.weight_in_force:g} (range [{w.low:g}, {w.high:g}], baseline {w.baseline:g})"
            )
        for h in s.history:
            verdict = "accepted" if h.accepted else f"refused: {h.reason}"
            print(f"  {h.at} {h.by}: {h.raw} {verdict}")
    return 0

"""``rlops reward whatif``: what a changed reward weight or parameter does to the KPIs."""

from __future__ import annotations

import argparse
from typing import Any

from rlops.commands.common_args import add_common_args, add_reward_fn_arg, context_from_args, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("reward", help="reward functions: what-ifs on their weights and parameters")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    w = verbs.add_parser(
        "whatif",
        help="train under a changed reward weight/parameter and compare it with the champion on every KPI",
    )
    add_common_args(w, run_key=False)
    add_reward_fn_arg(w)
    w.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="OBJECTIVE=WEIGHT",
        help="a new objective weight, e.g. compliance=0.62 (repeatable)",
    )
    w.add_argument(
        "--param",
        dest="params",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a new value of a constant the reward module declares in PARAMS (repeatable)",
    )
    w.add_argument("--episodes", type=int, default=None, help="held-out episodes (default: evaluate.episodes)")
    w.add_argument("--seed", type=int, default=7, help="training seed (default 7)")
    w.add_argument(
        "--timesteps", type=int, default=None, help="training budget in env steps (default: the PPO default)"
    )
    w.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    w.add_argument("--save", action="store_true", help="write the changed reward as the pack's next reward_vN.py")
    w.set_defaults(func=cmd_whatif)


def cmd_whatif(args: argparse.Namespace) -> int:
    from rlops.common.arguments import count
    from rlops.common.progress import show_progress
    from rlops.whatif.run import WhatIfSettings, reward_whatif

    ctx = context_from_args(args)
    settings = WhatIfSettings(
        episodes=args.episodes,
        seed=args.seed,
        timesteps=None if args.timesteps is None else count("--timesteps", args.timesteps),
        threads=count("--threads", args.threads, maximum=256),
    )
    result = reward_whatif(
        ctx, args.sets, args.params, settings, args.reward_fn, save=args.save, progress=show_progress(args.json)
    )
    if args.json:
        print_json({k: v for k, v in result.items() if k != "source"})
        return 0
    for line in summary_lines(result):
        print(line)
    return 0


def summary_lines(r: dict[str, Any]) -> list[str]:
    """The what-if as a person reads it: what changed, against what, every figure with its interval."""
    from rlops.whatif.compare import format_estimate

    pct = round(r["confidence"] * 100)
    out = [
        f"reward what-if on {r['scenario']}: {r['change']} (reward {r['reward_fn']} → {r['whatif_reward_fn']}, "
        f"sha256 {r['whatif_reward_fn_sha256'][:12]})",
        f"compared with {r['champion']} on {r['episodes']} held-out episodes (seed {r['seed']}) of the {r['world']}; "
        f"{pct}% intervals",
    ]
    for seg, block in r["segments"].items():
        out.append(f"[{seg}] {block['episodes']} episodes" + ("" if seg == "overall" else " (segment)"))
        rows = [(f"return under {k} reward", v, False) for k, v in block["returns"].items()]
        rows += [(k, v, r["kpis"][k]["rate"]) for k, v in block["kpis"].items()]
        for name, v, rate in rows:
            champ, what = format_estimate(v["champion"], rate), format_estimate(v["whatif"], rate)
            d = format_estimate(v["difference"], rate, signed=True)
            out.append(f"  {name:34} champion {champ:28} what-if {what:28} Δ {d}")
        if seg == "overall" and len(r["segments"]) > 3:
            out.append("  (per-segment figures: --json)")
            break
    dm = r["decision_map"]
    changed = dm["changed"]
    out.append(
        f"decision map: {dm['decisions_changed']:.1%} of {dm['states']} states decided differently; "
        + (
            f"top action changed in {len(changed)} of {len(dm['clusters'])} clusters"
            if changed
            else "no cluster changed its top action"
        )
    )
    for c in dm["clusters"]:
        if c["top_action_changed"]:
            out.append(f"  {c['name']} ({c['states']} states): {c['champion_top_action']} → {c['whatif_top_action']}")
    for note in r["notes"]:
        out.append(f"note: {note}")
    if r["saved_as"]:
        out.append(f"saved as {r['saved_as']}: next, `rlops stress --reward-fn {r['whatif_reward_fn']}`")
    else:
        out.append(f"not saved (--save writes it as {r['would_save_as']})")
    return out

"""``rlops env validate | describe | rollout``: work with scenario packs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rlops.commands.common_args import add_common_args, add_reward_fn_arg, pack_dir_from_args


def register(sub: argparse._SubParsersAction) -> None:
    env = sub.add_parser("env", help="validate, describe and roll out scenario packs")
    env_sub = env.add_subparsers(dest="env_command", required=True, metavar="ACTION")

    p = env_sub.add_parser("validate", help="load and check a pack (exit 2 on any error)")
    add_common_args(p, run_key=False)
    p.set_defaults(func=cmd_validate)

    p = env_sub.add_parser("describe", help="fields, actions, profiles and reward functions of a pack")
    add_common_args(p, run_key=False)
    p.add_argument("--state", action="store_true", help="list the state fields only")
    p.set_defaults(func=cmd_describe)

    p = env_sub.add_parser("rollout", help="run a reference policy and write trace rows")
    add_common_args(p, run_key=False)
    p.add_argument("--policy", choices=["random", "rules"], default="rules")
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--profile", default=None, help="simulation profile (default: the pack's default)")
    add_reward_fn_arg(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output file: .jsonl or .parquet")
    p.set_defaults(func=cmd_rollout)


def _load_checked_pack(args: argparse.Namespace) -> Any:
    """Load and validate the pack. The liveness check steps a few hundred tiny episodes, where
    torch's thread pool costs more than it gains (seconds on a busy machine): one thread."""
    import torch
    from sandbox.pack import load_pack
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return load_pack(pack_dir_from_args(args))
    finally:
        torch.set_num_threads(threads)


def cmd_validate(args: argparse.Namespace) -> int:
    pack = _load_checked_pack(args)
    if args.json:
        print(json.dumps({"pack": pack.name, "valid": True, "fields": len(pack.scenario.spec.fields),
                          "actions": pack.scenario.n_actions, "profiles": sorted(pack.scenario.profiles),
                          "reward_functions": {k: fn.version for k, fn in pack.reward_fns.items()},
                          "rules": len(pack.rules)}, indent=2))
        return 0
    print(f"ok: {pack.name} — {len(pack.scenario.spec.fields)} fields, {pack.scenario.n_actions} actions, "
          f"profiles {sorted(pack.scenario.profiles)}, reward functions {sorted(pack.reward_fns)}, "
          f"{len(pack.rules)} rules")
    return 0


def describe(pack: Any) -> dict[str, Any]:
    spec = pack.scenario.spec
    return {
        "name": spec.name,
        "description": spec.description,
        "horizon": spec.horizon,
        "state": [{"path": f.path, "type": f.type, "min": f.min, "max": f.max, "unit": f.unit,
                   "values": list(f.values) or None, "observed": f.observed, "visible_when": f.visible_when,
                   "init": f.init.dist or ("expr" if f.init.expr else "value")} for f in spec.fields],
        "actions": [{"name": a.name, "description": a.description, "required_fields": list(a.required_fields),
                     "precondition": a.precondition, "terminal": a.terminal, "api": a.api,
                     "human_takeover": a.human_takeover} for a in spec.actions],
        "profiles": {n: {"latency_jitter_ms": list(p.latency_jitter_ms), "error_rates": p.error_rates,
                         "population": [{"name": s.name, "probability": s.probability} for s in p.population]}
                     for n, p in spec.profiles.items()},
        "reward_functions": {label: {"version": fn.version, "components": [c.name for c in fn.components],
                                     "rule_refs": fn.rule_refs} for label, fn in pack.reward_fns.items()},
        "observation_dim": pack.scenario.layout.dim,
    }


def cmd_describe(args: argparse.Namespace) -> int:
    d = describe(_load_checked_pack(args))
    if args.state:
        d = {"name": d["name"], "state": d["state"]}
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    print(f"{d['name']}: {d.get('description', '').strip()}")
    print("\nstate:")
    for f in d["state"]:
        rng = f" [{f['min']}, {f['max']}]" if f["min"] is not None or f["max"] is not None else ""
        vals = f" {f['values']}" if f["values"] else ""
        hidden = "  (hidden)" if not f["observed"] else ""
        print(f"  {f['path']:<36} {f['type']:<6}{rng}{vals}{' ' + f['unit'] if f['unit'] else ''}{hidden}")
    if args.state:
        return 0
    print("\nactions:")
    for a in d["actions"]:
        print(f"  {a['name']:<22} {a['description']}")
    print("\nprofiles: " + ", ".join(d["profiles"]))
    for label, fn in d["reward_functions"].items():
        print(f"reward {label}: sha256 {fn['version'][:12]}…, components {', '.join(fn['components'])}")
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    from common.errors import UserError
    from sandbox.policies import random_policy, rule_policy
    from sandbox.traces import rollout_traces
    out = Path(args.out)
    if out.suffix not in (".jsonl", ".parquet"):
        raise UserError(f"--out {out}: expected a .jsonl or .parquet file name")
    if args.episodes < 1:
        raise UserError(f"--episodes {args.episodes}: expected a positive number of episodes")
    pack = _load_checked_pack(args)
    from common.config import load_params
    from sandbox.profiles import default_profile
    from sandbox.reward_choice import choose_reward
    reward = choose_reward(pack, args.reward_fn, load_params().get("reward_fn"))
    profile = default_profile(pack, "sandbox", args.profile)
    policy = random_policy(args.seed) if args.policy == "random" else rule_policy
    df = rollout_traces(pack, policy, args.episodes, seed=args.seed, profile=profile,
                        reward_version=reward.reward_fn, policy_version=args.policy)
    if not args.dry_run:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".parquet":
            df.to_parquet(out, index=False)
        else:
            df.to_json(out, orient="records", lines=True, date_format="iso")
    if args.json:
        print(json.dumps({"rows": len(df), "episodes": args.episodes, "policy": args.policy, "profile": profile,
                          "out": str(out), "dry_run": args.dry_run}))
    else:
        print(f"{'would write' if args.dry_run else 'wrote'} {len(df)} trace rows of {args.episodes} episodes "
              f"({args.policy}, profile {profile}) to {out}")
    return 0

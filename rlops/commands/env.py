"""``rlops env validate | describe | schema | diff | rollout``: work with scenario packs."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from rlops.commands.common_args import add_common_args, add_reward_fn_arg, pack_dir_from_args, print_json
from rlops.common.errors import UserError

# Bounds of the arguments, checked before any work: a rollout keeps every row in memory.
MAX_EPISODES = 100_000
MAX_ROWS = 2_000_000
MAX_SEED = 2**31 - 1


def _whole_number(text: str) -> int:
    """A whole number (its range is checked by the command, with the argument's name)."""
    try:
        return int(text)
    except ValueError:  # also a number of more than 4,300 digits
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None


def _check_ranges(args: argparse.Namespace) -> None:
    if args.episodes < 1:
        raise ArgumentError(f"--episodes {args.episodes}: expected a positive number of episodes")
    if args.episodes > MAX_EPISODES:
        raise ArgumentError(f"--episodes {args.episodes}: expected at most {MAX_EPISODES} episodes per rollout")
    if not 0 <= args.seed <= MAX_SEED:
        raise ArgumentError(f"--seed {args.seed}: expected a whole number from 0 to {MAX_SEED}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.5 <= value <= 600:  # also false for NaN
        raise argparse.ArgumentTypeError(f"expected a number of seconds from 0.5 to 600, got {text!r}")
    return value


class ArgumentError(UserError):
    """A bad argument of an ``env`` command (exit code 2)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    env = sub.add_parser("env", help="validate, describe and roll out scenario packs")
    env_sub = env.add_subparsers(dest="env_command", required=True, metavar="ACTION")

    p = env_sub.add_parser("validate", help="load and check a pack (exit 2 on any error)")
    add_common_args(p, run_key=False)
    p.add_argument(
        "--timeout", type=_seconds, default=None, help="seconds the check may take before it is stopped (default 5)"
    )
    p.set_defaults(func=cmd_validate)

    p = env_sub.add_parser("describe", help="fields, actions, profiles and reward functions of a pack")
    add_common_args(p, run_key=False)
    p.add_argument("--state", action="store_true", help="list the state fields only")
    p.set_defaults(func=cmd_describe)

    p = env_sub.add_parser(
        "schema", help="the pack's trace contract as a JSON Schema of one decision row (what an agent or a log writes)"
    )
    add_common_args(p, run_key=False)
    p.set_defaults(func=cmd_schema)

    p = env_sub.add_parser(
        "diff",
        help="what changing the pack (--scenario) into NEW does to agents that send the old shape and to the "
        "rows already stored (exit 1 when some would be refused)",
    )
    add_common_args(p)
    p.add_argument("new", metavar="NEW", help="the pack as it would be: a pack folder carrying the pack's name")
    p.add_argument(
        "--hours", type=_whole_number, default=None, help="stored rows of the last HOURS hours (default: 24)"
    )
    p.set_defaults(func=cmd_diff)

    p = env_sub.add_parser("rollout", help="run a reference policy and write trace rows")
    add_common_args(p, run_key=False)
    p.add_argument("--policy", choices=["random", "rules"], default="rules")
    p.add_argument("--episodes", type=_whole_number, default=1000)
    p.add_argument("--profile", default=None, help="simulation profile (default: the pack's default)")
    add_reward_fn_arg(p)
    p.add_argument("--seed", type=_whole_number, default=0)
    p.add_argument("--out", required=True, help="output file: .jsonl or .parquet")
    p.set_defaults(func=cmd_rollout)


def cmd_validate(args: argparse.Namespace) -> int:
    # The pack's Python runs in a child process with time and memory limits; this process only
    # reads the verdict (and never imports torch).
    from rlops.sandbox.isolate import TIMEOUT_S, validate_isolated

    s = validate_isolated(str(pack_dir_from_args(args)), timeout_s=args.timeout or TIMEOUT_S)
    if args.json:
        print_json(s)
        return 0
    roles = "".join(f", role {name} ({len(r['actions'])} actions)" for name, r in s.get("roles", {}).items())
    print(
        f"ok: {s['pack']} — {s['fields']} fields, {s['actions']} actions{roles}, profiles {s['profiles']}, "
        f"reward functions {sorted(s['reward_functions'])}, {s['rules']} rules"
    )
    return 0


def _load_checked(path: str) -> Any:
    """The pack at ``path``, after the bounded check in a child process: its code is only run in
    this process once it is known to import and score in time."""
    from rlops.sandbox.isolate import validate_isolated
    from rlops.sandbox.pack import load_pack

    validate_isolated(path)
    return load_pack(path, check_liveness=False)


def describe(pack: Any) -> dict[str, Any]:
    from rlops.sandbox.isolate import roles_summary

    spec = pack.scenario.spec
    return {
        "name": spec.name,
        "description": spec.description,
        "horizon": spec.horizon,
        "state": [
            {
                "path": f.path,
                "type": f.type,
                "min": f.min,
                "max": f.max,
                "unit": f.unit,
                "values": list(f.values) or None,
                "observed": f.observed,
                "visible_when": f.visible_when,
                "init": f.init.dist or ("expr" if f.init.expr else "value"),
            }
            for f in spec.fields
        ],
        "actions": [
            {
                "name": a.name,
                "description": a.description,
                "required_fields": list(a.required_fields),
                "precondition": a.precondition,
                "terminal": a.terminal,
                "api": a.api,
                "human_takeover": a.human_takeover,
            }
            for a in spec.actions
        ],
        **roles_summary(spec),
        "profiles": {
            n: {
                "latency_jitter_ms": list(p.latency_jitter_ms),
                "error_rates": p.error_rates,
                "population": [{"name": s.name, "probability": s.probability} for s in p.population],
            }
            for n, p in spec.profiles.items()
        },
        "reward_functions": {
            label: {
                "version": fn.version,
                "components": [c.name for c in fn.components],
                "rule_refs": fn.rule_refs,
                **({"component_roles": {c.name: c.role or "team" for c in fn.components}} if spec.roles else {}),
            }
            for label, fn in pack.reward_fns.items()
        },
        "observation_dim": pack.scenario.layout.dim,
    }


def cmd_schema(args: argparse.Namespace) -> int:
    from rlops.data_contracts.contracts import contract_for
    from rlops.data_contracts.json_schema import contract_json_schema

    print_json(contract_json_schema(contract_for(_load_checked(str(pack_dir_from_args(args))))))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    d = describe(_load_checked(str(pack_dir_from_args(args))))
    if args.state:
        d = {"name": d["name"], "state": d["state"]}
    if args.json:
        print_json(d)
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
    for name, r in d.get("roles", {}).items():
        turn = "when no role above acts" if r["acts_when"] == "otherwise" else f"when {r['acts_when']}"
        print(f"\nrole {name} (acts {turn}): {', '.join(r['actions'])}")
    print("\nprofiles: " + ", ".join(d["profiles"]))
    for label, fn in d["reward_functions"].items():
        roles = fn.get("component_roles", {})
        comps = [f"{c} [{roles[c]}]" if roles else c for c in fn["components"]]
        print(f"reward {label}: sha256 {fn['version'][:12]}…, components {', '.join(comps)}")
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    from rlops.common.config import load_params
    from rlops.sandbox.policies import random_policy, rule_policy
    from rlops.sandbox.profiles import default_profile
    from rlops.sandbox.reward_choice import choose_reward
    from rlops.sandbox.reward_runtime import RewardError
    from rlops.sandbox.traces import rollout_traces

    _check_ranges(args)
    out = _check_out(Path(args.out), create=not args.dry_run)
    pack = _load_checked(str(pack_dir_from_args(args)))
    reward = choose_reward(pack, args.reward_fn, load_params().get("reward_fn"))
    if args.profile is not None and args.profile not in pack.scenario.profiles:
        raise ArgumentError(
            f"--profile {args.profile}: pack {pack.name} has profiles "
            f"{', '.join(sorted(pack.scenario.profiles))}; expected one of them"
        )
    profile = default_profile(pack, "sandbox", args.profile)
    if args.episodes * pack.scenario.spec.horizon > MAX_ROWS:
        raise ArgumentError(
            f"--episodes {args.episodes}: with a horizon of {pack.scenario.spec.horizon} steps the "
            f"rollout could hold {args.episodes * pack.scenario.spec.horizon} rows, over the limit of "
            f"{MAX_ROWS}; roll out fewer episodes per call"
        )
    policy = random_policy(args.seed) if args.policy == "random" else rule_policy
    try:
        df = rollout_traces(
            pack,
            policy,
            args.episodes,
            seed=args.seed,
            profile=profile,
            reward_fn=reward.reward_fn,
            policy_version=args.policy,
        )
    except RewardError as exc:
        raise ArgumentError(f"{exc}; fix the reward function of {pack.name}") from None
    if not args.dry_run:
        _write_atomic(df, out)
    if args.json:
        print_json(
            {
                "rows": len(df),
                "episodes": args.episodes,
                "policy": args.policy,
                "profile": profile,
                **reward.as_fields(),
                "out": str(out),
                "dry_run": args.dry_run,
            },
            None,
        )
    else:
        print(
            f"{'would write' if args.dry_run else 'wrote'} {len(df)} trace rows of {args.episodes} episodes "
            f"({args.policy}, profile {profile}, reward {reward.reward_fn}) to {out}"
        )
    return 0


def _check_out(out: Path, create: bool = True) -> Path:
    """``--out`` must name a .jsonl/.parquet file in a folder this process can write: found out
    before the rollout runs, not after (a dry run only checks the name)."""
    if out.suffix not in (".jsonl", ".parquet"):
        raise ArgumentError(f"--out {out}: expected a .jsonl or .parquet file name")
    if out.is_dir():
        raise ArgumentError(f"--out {out}: is a folder; expected a file name")
    if not create:
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise ArgumentError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    return out


def _write_atomic(df: Any, out: Path) -> None:
    """Write to a temporary file next to ``out`` and rename it into place, so that a failure
    leaves the previous file (or none), never a truncated one."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if out.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_json(tmp, orient="records", lines=True, date_format="iso")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp creates 0600; the result gets the usual permissions
        os.replace(tmp, out)
    except OSError as exc:
        raise ArgumentError(f"--out {out}: writing failed ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cmd_diff(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from rlops.commands.common_args import context_from_args
    from rlops.common.run_key import RunKey
    from rlops.data_contracts.contract_diff import as_dict, contract_changes, stored_rows_under
    from rlops.data_contracts.contracts import contract_for

    old = _load_checked(str(pack_dir_from_args(args)))
    new = _load_checked(str(pack_dir_from_args(argparse.Namespace(scenario=args.new))))
    if old.name != new.name:
        raise ArgumentError(
            f"env diff: the pack is {old.name!r} and NEW is pack {new.name!r}; expected two versions of one pack"
        )
    new_contract = contract_for(new)
    changes = contract_changes(contract_for(old), new_contract)
    if args.run_key is not None and args.hours is not None:
        raise ArgumentError("env diff: give --hours or --run-key, not both")
    if args.run_key is not None:
        window = RunKey.parse(args.run_key)
    else:
        hours = 24 if args.hours is None else args.hours
        if not 1 <= hours <= 24 * 366:
            raise ArgumentError(f"--hours {hours}: expected a whole number of hours from 1 to {24 * 366}")
        end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        window = RunKey(end - timedelta(hours=hours), end)
    ctx = context_from_args(argparse.Namespace(scenario=args.new, run_key=str(window)))
    stored = stored_rows_under(ctx.traces.read(ctx.scenario, (window.start, window.end)), new_contract)
    report = as_dict(changes, stored)
    if args.json:
        print_json(report)
    else:
        print(f"{new.name}: {len(changes)} change(s) of the trace contract")
        for c in changes:
            mark = "BREAKS" if c.breaks else "ok"
            print(f"  {mark:<6} {c.column}: {c.change} {c.before} -> {c.after}: {c.effect}")
        print(
            f"stored rows of {window}: {stored.rows} read, {stored.accepted} would be accepted, "
            f"{stored.quarantined} refused"
            + "".join(f"\n  {n} x {reason}" for reason, n in stored.reasons.items())
            + "".join(f"\n  {n} would take the default of {col}" for col, n in stored.defaulted.items())
        )
    return 1 if report["breaking"] else 0

"""``rlops train policy | reward-model | status``: train a candidate policy or the reward model,
and read a training run's per-iteration metrics."""

from __future__ import annotations

import argparse
import dataclasses

from rlops.commands.common_args import (
    add_common_args,
    add_reward_fn_arg,
    as_user_error,
    context_from_args,
    infrastructure,
    print_result,
)
from rlops.common import step_request
from rlops.pipeline_steps.training.request import TrainRequest, TuneRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    train = sub.add_parser("train", help="train a policy (masked PPO) or the reward model; training status")
    verbs = train.add_subparsers(dest="train_command", required=True, metavar="ACTION")

    p = verbs.add_parser(
        "policy",
        help="train a candidate policy (masked PPO) and register it",
        description="With --dry-run the mode (the champion's layout), the budget and the reuse of an "
        "identical training are decided as in a real run, but nothing is trained: a new version "
        "and its return exist only once trained, so they say 'not computed'.",
    )
    add_common_args(p)
    add_reward_fn_arg(p)
    step_request.add_arguments(p, TrainRequest)
    p.set_defaults(func=cmd_policy)

    p = verbs.add_parser(
        "relabel",
        help="score the window's captured traces with the reward model; write per-step reward labels next to them",
    )
    add_common_args(p)
    p.add_argument("--reward-model-version", default=None, help="version of <scenario>-reward-model (default: newest)")
    p.add_argument("--traces", default=None, help="trace parquet file or folder (default: the trace store)")
    p.set_defaults(func=cmd_relabel)

    p = verbs.add_parser(
        "switch-reward", help="switch the reward function of a running training before its next iteration"
    )
    add_common_args(p)
    p.add_argument("--to", required=True, metavar="LABEL", help="reward function label of the pack, e.g. v2")
    p.set_defaults(func=cmd_switch_reward)

    p = verbs.add_parser(
        "reward-model",
        help="fit the reward model on sandbox pairs and human labels",
        description="With --dry-run nothing is trained: the version and its held-out metrics exist "
        "only once trained, so the dry run's model_version says 'not computed'.",
    )
    add_common_args(p)
    add_reward_fn_arg(p)
    p.add_argument("--pairs", type=int, default=None, help="sandbox preference pairs (default: params)")
    p.set_defaults(func=cmd_reward_model)

    p = verbs.add_parser(
        "tune",
        help="search PPO settings for a pack (Optuna; first trial = the defaults)",
        description="With --dry-run no trial is run: the best settings come from training the trials, "
        "so the dry run's best says 'not computed'.",
    )
    add_common_args(p, run_key=False)
    step_request.add_arguments(p, TuneRequest)
    add_reward_fn_arg(p)
    p.set_defaults(func=cmd_tune)

    p = verbs.add_parser("status", help="per-iteration metrics of a training run")
    add_common_args(p)
    p.add_argument(
        "run_id", metavar="RUN_ID", nargs="?", default=None, help="the training's MLflow run id (or give --pid)"
    )
    p.add_argument("--pid", type=int, default=None, help="the process id of a training in progress on this machine")
    p.add_argument("--last", type=int, default=20, metavar="N", help="show the last N iterations (0: all; default 20)")
    p.add_argument("--follow", action="store_true", help="refresh every --interval seconds until the run ends")
    p.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="refresh period of --follow")
    p.add_argument("--all", action="store_true", help="every logged metric, not the usual columns")
    p.add_argument("--csv", default=None, metavar="FILE", help="also write the table as CSV (e.g. for dvc plots)")
    p.set_defaults(func=cmd_status)


def cmd_policy(args: argparse.Namespace) -> int:
    from rlops.common.errors import UserError
    from rlops.common.progress import show_progress
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.registry.client import TrackingError, policy_model_name

    ctx = context_from_args(args)
    try:
        request = step_request.from_args(TrainRequest, args)
        res = train_policy(
            ctx, dataclasses.replace(request, reward_fn=args.reward_fn), progress=show_progress(args.json)
        )
    except KeyError as exc:  # unknown reward function label
        raise UserError(str(exc).strip("'\"")) from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    except TrackingError as exc:
        raise infrastructure(exc) from exc
    inputs, name = res.inputs, policy_model_name(res.inputs.scenario)
    if res.plan is not None:
        lines = [
            f"dry run: would train {inputs.mode} ({inputs.timesteps_budget:,} steps, {inputs.num_envs} envs, "
            f"profile {inputs.profile}) with reward {inputs.reward_fn} ({inputs.reward_fn_sha256[:12]})",
            f"  warm start: {res.plan.warm_start}; resume from: {res.plan.resume_from or 'nothing'}",
            f"  would register a version of {res.plan.would_register}",
        ]
    elif res.dry_run:
        lines = [
            f"dry run: {name} v{res.model_version} was trained with the same inputs (run {res.run_id}); "
            "the training would return it"
        ]
    else:
        lines = [
            f"{inputs.scenario}: registered {name} v{res.model_version} "
            f"(run {res.run_id}{', reused' if res.reused else ''})",
            f"  mode {inputs.mode}, parent champion {inputs.parent_champion or 'none'}, mean return {res.mean_return}",
        ]
    if inputs.note:
        lines.append(f"  note: {inputs.note}")
    print_result(res.as_dict(), args.json, lines)
    return 0


def cmd_reward_model(args: argparse.Namespace) -> int:
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.training.reward_model import train_reward_model_step

    ctx = context_from_args(args)
    try:
        res = train_reward_model_step(ctx, args.reward_fn, args.pairs)
    except KeyError as exc:
        raise UserError(str(exc).strip("'\"")) from None
    if res.dry_run:
        line = (
            f"would train the {ctx.scenario} reward model on {res.sandbox_pairs} sandbox pairs "
            f"(+ human labels) for reward {res.reward_fn}"
        )
    else:
        line = (
            f"reward model {ctx.scenario}-reward-model v{res.model_version}: held-out pairwise accuracy "
            f"{res.heldout_pairwise_accuracy:.3f}, Spearman {res.spearman:.3f} on {res.pairs} pairs"
        )
    print_result(res.as_dict(), args.json, [line])
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.training.tune import defaults_of, tune
    from rlops.registry.client import TrackingError

    # bounds checked as a DAG conf's are: NaN or an infinite --budget-s is refused, not "no limit"
    request = dataclasses.replace(step_request.from_args(TuneRequest, args), reward_fn=args.reward_fn)
    ctx = context_from_args(args)
    if args.dry_run:
        base = defaults_of(ctx.config.train, ctx.config.ppo, ctx.load_pack(), request.timesteps, request.device)
        res = {
            "dry_run": True,
            "scenario": ctx.scenario,
            "defaults": base,
            "trials": request.trials,
            "budget_s": request.budget_s,
            "timesteps_per_trial": request.timesteps,
            "best": "not computed: a dry run trains no trial, and the best settings come from the trials",
        }
        print_result(
            res,
            args.json,
            [
                f"dry run: would tune {ctx.scenario} for up to {request.trials} trials of "
                f"{request.timesteps:,} steps from the defaults {base}"
            ],
        )
        return 0
    try:
        out = tune(ctx, request)
    except KeyError as exc:
        raise UserError(str(exc).strip("'\"")) from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    except TrackingError as exc:
        raise infrastructure(exc) from exc
    res = out.to_dict()
    pruned = sum(1 for t in out.trials if t["pruned"])
    lines = [
        f"{ctx.scenario}: {len(out.trials)} trials ({pruned} pruned) in {out.wall_s:.0f}s, "
        f"tuning run {out.parent_run_id}",
        f"  defaults: greedy return {out.default_value:.4f}  {out.default_params}",
        f"  best:     greedy return {out.best_value:.4f}  {out.best_params}",
        f"  written to {out.written}" if out.written else "  (not written; --write puts it in the pack's params.yaml)",
    ]
    print_result(res, args.json, lines)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    import pandas as pd

    from rlops.common.errors import UserError
    from rlops.pipeline_steps.training.status import train_status
    from rlops.registry.client import TrackingError

    if (args.run_id is None) == (args.pid is None):
        raise UserError("train status: give either a RUN_ID or --pid PID (the process of a training in progress)")
    if args.last < 0 or args.interval <= 0:
        raise UserError(f"--last must be 0 or more and --interval positive, got {args.last} and {args.interval}")
    ctx = context_from_args(args)
    run_id = args.run_id
    while True:
        try:
            res = train_status(ctx, run_id, args.all, pid=args.pid if run_id is None else None, last=args.last)
        except LookupError as exc:
            raise UserError(str(exc).strip("'\"")) from None
        except TrackingError as exc:
            raise infrastructure(exc) from exc
        run_id = res.run_id  # a --pid run is followed by its id once found (it outlives the lookup)
        table = pd.DataFrame(res.rows, columns=res.columns)
        flag = (
            f"PLATEAU: no better return for {res.iterations_without_improvement} iterations"
            if res.plateau
            else f"no plateau ({res.iterations_without_improvement} iterations since "
            f"the best return, flagged at {res.plateau_window})"
        )
        lines = [
            f"run {res.run_id} ({res.run_name}): {res.status}, {res.iterations} iterations; {flag}",
            table.to_string(index=False, float_format=lambda v: f"{v:.4g}") if len(table) else "(no metrics)",
        ]
        print_result(res.as_dict(), args.json, lines)
        if not args.follow or res.status != "RUNNING":
            break
        print(flush=True)
        time.sleep(args.interval)
    if args.csv and not args.dry_run:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
    return 0


def cmd_relabel(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.training.relabel import relabel_step

    ctx = context_from_args(args)
    with as_user_error("train relabel"):
        res = relabel_step(ctx, args.reward_model_version, args.traces)
    print_result(
        res.as_dict(),
        args.json,
        [
            f"relabelled {res.rows_out} of {res.rows_in} trace rows with reward model "
            f"v{res.reward_model_version}: {res.labels_uri}" + (f" ({res.note})" if res.note else "")
        ],
    )
    return 0


def cmd_switch_reward(args: argparse.Namespace) -> int:
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.training.hot_reload import request_switch

    ctx = context_from_args(args)
    try:
        res = request_switch(ctx, args.to)
    except KeyError as exc:
        raise UserError(f"train switch-reward --to {args.to}: {str(exc).strip(chr(39))}") from None
    print_result(
        res.as_dict(),
        args.json,
        [
            ("would ask" if ctx.dry_run else "asked") + f" the training of {ctx.scenario} "
            f"run key {ctx.run_key} to switch to reward {res.reward_fn} "
            f"({res.reward_fn_sha256[:12]}) before its next iteration"
        ],
    )
    return 0

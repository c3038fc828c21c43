"""``rlops stress``: a reward function (and a policy) at the edges; exit 1 when anything fails."""

from __future__ import annotations

import argparse

from rlops.commands.common_args import add_common_args, add_reward_fn_arg, as_user_error, context_from_args, print_json
from rlops.common import step_request
from rlops.pipeline_steps.stress.request import StressRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("stress", help="stress a reward function (and a policy) at the edges; exit 1 on fail")
    add_common_args(p)
    add_reward_fn_arg(p, files=True)  # shared with the other commands; read into the request below
    step_request.add_arguments(p, StressRequest, skip=("reward_fn",))
    p.set_defaults(func=cmd_stress)


def cmd_stress(args: argparse.Namespace) -> int:

    from rlops.common.progress import show_progress
    from rlops.pipeline_steps.stress.step import stress_test

    ctx = context_from_args(args)
    request = step_request.from_args(StressRequest, args)
    with as_user_error("stress"):
        result = stress_test(ctx, request, progress=show_progress(args.json))
    if args.json:
        print_json(result.as_dict())
    else:
        print(
            f"stress test {result.verdict.upper()}: reward {result.reward_fn}"
            + (f", policy v{request.policy_version}" if request.policy_version else "")
        )
        for reason in result.reasons:
            print(f"  - {reason}")
        for warning in result.warnings:
            print(f"  ! {warning}")
        print(("would write " if ctx.dry_run else "report: ") + result.html_uri)
    return 0 if result.passed else 1

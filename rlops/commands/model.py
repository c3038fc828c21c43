"""``rlops model evaluate | promote | rollout | rollback``: gated evaluation, promotion, the staged
roll-out's tick and rollback of registered policy versions. Exit 1 when a gate fails. ``rlops model
evaluate --target`` instead estimates any target on logged traffic: a report, exit 0 whatever it
shows."""

from __future__ import annotations

import argparse
from typing import Any

from rlops.commands.common_args import add_common_args, context_from_args, infrastructure, print_result
from rlops.common import step_request
from rlops.pipeline_steps.promotion.outcome import PromotionOutcome
from rlops.pipeline_steps.promotion.request import EvaluateRequest, OffPolicyRequest, PromoteRequest, RolloutRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    model = sub.add_parser("model", help="evaluate, promote or roll back a registered policy version")
    verbs = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    for verb, helptext in (
        (
            "evaluate",
            "compare a candidate policy with the champion and print the gate table, or (--target) estimate "
            "any target off-policy on logged traffic",
        ),
        ("promote", "evaluate and, when every gate passes, make the candidate champion"),
    ):
        p = verbs.add_parser(verb, help=helptext)
        add_common_args(p)
        if verb == "evaluate":
            step_request.add_alternatives(p, EvaluateRequest, OffPolicyRequest)
        else:
            step_request.add_arguments(p, EvaluateRequest)  # a promotion evaluates the candidate first
            step_request.add_arguments(p, PromoteRequest)
        p.set_defaults(func=cmd_evaluate if verb == "evaluate" else cmd_promote)
    p = verbs.add_parser(
        "rollout",
        help="one roll-out tick, as the roll-out DAG runs it: move a staged challenger on its live A/B gates "
        "(advance, finish, withdraw or hold), or roll back a champion whose live return regressed",
    )
    add_common_args(p)
    step_request.add_arguments(p, RolloutRequest)
    p.set_defaults(func=cmd_rollout)
    p = verbs.add_parser("rollback", help="point the champion back at the previous champion (again: further back)")
    add_common_args(p)
    p.add_argument("--reason", default=None, help="why (recorded on the demoted version as rlops.rolled_back.reason)")
    p.set_defaults(func=cmd_rollback)
    _register_webhook(verbs)


def _register_webhook(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``rlops model webhook serve|register``: promotion requested from the MLflow UI, still gated."""
    p = verbs.add_parser("webhook", help="promotion from the MLflow UI: the webhook receiver")
    hooks = p.add_subparsers(dest="webhook_command", required=True, metavar="ACTION")
    s = hooks.add_parser("serve", help="serve the receiver of MLflow's webhook calls")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8766)
    s.add_argument(
        "--mode",
        choices=["embedded", "airflow"],
        default=None,
        help="embedded: promote in this process; airflow: trigger the promotion DAG (default: params)",
    )
    s.set_defaults(func=cmd_webhook_serve)
    r = hooks.add_parser("register", help="create or update the MLflow webhook that calls the receiver")
    r.add_argument(
        "--url", required=True, help="public URL of the receiver, e.g. https://rlops.example.com/mlflow/webhook"
    )
    r.add_argument("--tracking-uri", default=None, help="MLflow server (default: tracking.uri of params)")
    r.set_defaults(func=cmd_webhook_register)


def cmd_webhook_serve(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.promotion.webhook import serve

    return serve(args.host, args.port, args.mode)


def cmd_webhook_register(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.promotion.webhook import register

    print(f"webhook {_call(register, args.url, args.tracking_uri)} → {args.url}")
    return 0


def _gate_lines(res: dict[str, Any]) -> list[str]:
    from rlops.pipeline_steps.promotion.gates import gate_state

    def fmt(v: Any) -> str:
        return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))

    lines = [f"  {'gate':<28} {'candidate':>12} {'champion':>12}  {'threshold':<34} result"]
    for g in res.get("gates", []):
        verdict = gate_state(g)
        lines.append(
            f"  {g['gate']:<28} {fmt(g['candidate']):>12} {fmt(g['champion']):>12}  {g['threshold']:<34} {verdict}"
        )
    return lines


def _call(fn: Any, *a: Any, **kw: Any) -> Any:
    """Run a promotion function: bad input (an unknown version, a bad setting) exits 2, an
    unreachable registry or store exits 1, both with the message on stderr."""
    from rlops.common.errors import UserError
    from rlops.registry.client import TrackingError
    from rlops.storage.backend import StorageError

    try:
        return fn(*a, **kw)
    except (TrackingError, StorageError) as exc:
        raise infrastructure(exc) from exc
    except (ValueError, KeyError) as exc:
        raise UserError(str(exc).strip("'\"")) from None


def cmd_evaluate(args: argparse.Namespace) -> int:
    request = step_request.from_alternatives(args, EvaluateRequest, OffPolicyRequest)
    if isinstance(request, OffPolicyRequest):
        return cmd_evaluate_target(args, request)
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate

    res = _call(evaluate_candidate, context_from_args(args), request)
    head = [
        f"{res.scenario}: v{res.candidate} vs {res.baseline} on {res.episodes} episodes "
        f"({res.profile} profile): {'PASS' if res.passed else 'FAIL'}"
    ]
    report = res.as_dict()
    print_result(report, args.json, head + _gate_lines(report) + [f"  note: {n}" for n in res.notes])
    return 0 if res.passed else 1


def cmd_evaluate_target(args: argparse.Namespace, request: OffPolicyRequest) -> int:
    from rlops.pipeline_steps.promotion.ope_targets import evaluate_target

    res = _call(evaluate_target, context_from_args(args), request)
    report = res.as_dict()
    print_result(report, args.json, _estimate_lines(report))
    return 0


def _estimate_lines(res: dict[str, Any]) -> list[str]:
    """The report as text: one line per estimator with its interval, then the weights, the
    logged value and why the evidence cannot decide, if it cannot."""

    def num(v: Any, spec: str = ".4g") -> str:
        return "n/a" if v is None else format(v, spec)

    lines = [
        f"{res['scenario']}: {res['policy']} ({res['serves']}) on {res['episodes']:,} complete live episodes, "
        f"{res['rows']:,} rows, {res['window_start']} – {res['window_end']}"
    ]
    estimates = res["estimates"]
    if estimates:
        level = f"{res['confidence']:.0%}"
        lines.append(f"  {'estimator':<10} {'value':>10}  {level} interval")
        for name, e in estimates.items():
            lines.append(f"  {name.upper():<10} {num(e['value']):>10}  [{num(e['low'])}, {num(e['high'])}] ({e['ci']})")
        lines.append(f"  direct method: {res['direct_method']}")
    w = res["weights"] or {}
    lines += [
        f"  ESS {num(res['ess'], '.1f')} of {res['episodes']:,} episodes",
        f"  largest weight {num(w.get('max'))}, top-10 weight share {num(w.get('top_share'), '.1%')}",
        f"  unsupported share {num(res['unsupported_share'], '.1%')}",
        f"  logged value {num(res['logged_return'])} (se {num(res['logged_return_se'])})",
    ]
    if res["insufficient"]:
        lines.append(f"  insufficient: {res['insufficient']}")
    return lines + [f"  note: {n}" for n in res["notes"]]


def cmd_promote(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.promotion.flow import promote

    evaluation = step_request.from_args(EvaluateRequest, args)
    promotion = step_request.from_args(PromoteRequest, args)
    ctx = context_from_args(args)
    staged = ctx.config.promotion.staged if promotion.staged is None else promotion.staged
    res: PromotionOutcome = _call(promote, ctx, evaluation.candidate, staged, evaluation.episodes)
    out = res.as_dict()
    print_result(out, args.json, [f"{res.scenario}: {res.reason}"] + _gate_lines(out))
    return 0 if res.action in ("champion", "challenger", "would_promote", "would_stage") else 1


def cmd_rollback(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.promotion.flow import rollback

    res: PromotionOutcome = _call(rollback, context_from_args(args), args.reason)
    after = f" (previous: v{res.previous})" if res.previous else " (no earlier champion left)"
    print_result(res.as_dict(), args.json, [f"{res.scenario}: {res.reason}" + ("" if res.dry_run else after)])
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    res = _call(rollout_step, context_from_args(args), step_request.from_args(RolloutRequest, args))
    move = res.move
    who = f"v{move.version}" if move.version else "no version"
    lines = [f"{res.scenario}: {who} {move.action}: {move.reason}", f"  champion: v{res.champion or 'none'}"]
    print_result(res.as_dict(), args.json, lines)
    return 0

"""``rlops outcome import FILE | capture | schema``: late business outcomes into the outcome store."""

from __future__ import annotations

import argparse
import sys

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_json, print_result
from rlops.common import step_request
from rlops.pipeline_steps.outcomes.request import OutcomeCaptureRequest, OutcomeImportRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "outcome",
        help="late business outcomes (a default, a click) of captured episodes → the outcome store",
        description="Outcomes are checked against the outcome contract (docs/outcomes.md) and the trace store: an "
        "outcome of an episode the trace store does not hold, or later than outcomes.max_delay_days after its "
        "last decision, is quarantined with its reason (records in = accepted + quarantined). A repeated outcome "
        "changes nothing; a changed value replaces the stored one and is listed. Reads of the trace store join "
        "them into returns.",
    )
    verbs = p.add_subparsers(dest="outcome_command", required=True, metavar="ACTION")
    i = verbs.add_parser("import", help="a file of outcomes: JSON lines, CSV or parquet")
    add_common_args(i, run_key=False)
    i.add_argument("path", metavar="FILE", help=step_request.options(OutcomeImportRequest)[0].help)
    step_request.add_arguments(i, OutcomeImportRequest, skip=("path",))
    c = verbs.add_parser("capture", help="the outcome lines Tracer.outcome landed in the run key's interval")
    add_common_args(c)
    step_request.add_arguments(c, OutcomeCaptureRequest)
    s = verbs.add_parser("schema", help="print the JSON Schema of one outcome line")
    for q in (i, c):
        q.set_defaults(func=cmd_outcome)
    s.set_defaults(func=cmd_schema)


def cmd_outcome(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.outcomes.step import capture_outcomes, import_outcomes

    ctx = context_from_args(args)
    with as_user_error(f"outcome {args.outcome_command}"):
        if args.outcome_command == "import":
            res = import_outcomes(ctx, OutcomeImportRequest(path=args.path))
        else:
            res = capture_outcomes(ctx, step_request.from_args(OutcomeCaptureRequest, args))
    verb = "would write" if ctx.dry_run else "wrote"
    print_result(
        res.as_dict(),
        args.json,
        [
            f"{res.source}: {res.records_in} records in, {res.records_accepted} accepted, "
            f"{res.records_quarantined} quarantined; values {res.values_added} added, {res.values_unchanged} "
            f"unchanged, {res.values_replaced} replaced; {verb} {len(res.partitions)} partition(s)"
        ],
    )
    for r in res.replacements:
        print(
            f"replaced: episode {r['episode_id']} {r['kind']}.{r['name']}: {r['old_value']:g} → {r['new_value']:g}",
            file=sys.stderr,
        )
    for reason, n in res.quarantine_reasons.items():
        print(f"warning: {n} record(s) quarantined ({reason}) in {res.quarantine_uri}", file=sys.stderr)
    for skipped in res.skipped_files:
        print(f"warning: {skipped}: not JSON lines; not read", file=sys.stderr)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from rlops.data_contracts.outcomes import outcome_json_schema

    print_json(outcome_json_schema())
    return 0

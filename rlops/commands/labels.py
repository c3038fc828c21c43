"""``rlops labels run | export | import``: the human label queue and its Label Studio round trip."""

from __future__ import annotations

import argparse
import sys

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_json
from rlops.common import step_request
from rlops.pipeline_steps.labels.request import LabelQueueRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("labels", help="queue uncertain states for human labels; Label Studio export/import")
    verbs = p.add_subparsers(dest="labels_command", required=True, metavar="ACTION")
    r = verbs.add_parser("run", help="enqueue the latest states of high-entropy clusters")
    add_common_args(r)
    step_request.add_arguments(r, LabelQueueRequest)
    e = verbs.add_parser("export", help="write pending items as Label Studio tasks")
    add_common_args(e)
    e.add_argument("--out", help="output URI of the tasks JSON")
    i = verbs.add_parser("import", help="ingest a Label Studio JSON export")
    add_common_args(i)
    i.add_argument("file", help="URI or path of the Label Studio export (JSON)")
    for q in (r, e, i):
        q.set_defaults(func=cmd_labels)


def cmd_labels(args: argparse.Namespace) -> int:

    from rlops.pipeline_steps.labels.step import label_queue_export, label_queue_import, label_queue_run

    ctx = context_from_args(args)
    with as_user_error(f"labels {args.labels_command}"):
        if args.labels_command == "run":
            result = label_queue_run(ctx, step_request.from_args(LabelQueueRequest, args)).as_dict()
        elif args.labels_command == "export":
            result = label_queue_export(ctx, args.out).as_dict()
        else:
            result = label_queue_import(ctx, args.file).as_dict()
    if args.json:
        print_json(result)
    else:
        print(", ".join(f"{k}={v}" for k, v in result.items() if not isinstance(v, (list, dict))))
    for old in result.get("stale") or []:
        print(
            f"warning: item {old['item_id']}: label {old['label']!r} ({old['labelled_at']}) is older than the "
            f"stored {old['stored_label']!r} ({old['stored_at']}); not applied",
            file=sys.stderr,
        )
    if result.get("conflicts"):
        print(
            f"warning: {len(result['conflicts'])} item(s) labelled differently by different annotators; "
            f"not applied, listed in {result.get('conflicts_uri')}",
            file=sys.stderr,
        )
    return 0

"""``rlops label-queue run | export | import``: send the states the policy is unsure about to people.

run
    Reads the window's trace rows, computes each state's masked policy entropy normalised by
    ``log(number of legal actions)`` (1 = uniform over the legal actions; states with a single
    legal action are skipped — there is nothing to choose), clusters the states and enqueues the
    latest ``states_per_cluster`` states of every cluster whose mean normalised entropy is above
    ``threshold`` in every time bucket of the window (``bucket_minutes``; buckets with fewer than
    ``min_bucket_states`` states of the cluster are not judged).

    Clustering is k-means (k-means++ seeding, fixed seed, torch) on the encoded state features
    plus the action mask — the very inputs the policy conditions on, already scaled to about
    [-1, 1] with one-hot enums. k-means was chosen over hashing discretised key fields because it
    adapts to where the traffic actually is: every cluster has enough states for a stable mean
    entropy, with no hand-picked key fields or bin edges per scenario (hashing many fields makes
    the clusters combinatorially small). Identical states always share a cluster.

export
    Pending items as Label Studio tasks (``[{"data": {...}}]``) plus the labelling config; items
    become ``exported``. Re-running the export of a run key writes the same tasks again (plus any
    new pending items); items exported under another run key are not sent twice.
import
    A Label Studio JSON export: per task the latest non-cancelled annotation's chosen action is
    stored as the item's label (it must be one of the item's legal actions). Tasks in = labels
    ingested + rejected (with reasons) + not annotated.

Labels feed training through :func:`labels_as_pairs` (the labelled action preferred over every
other legal action, for the Bradley–Terry reward model) and :func:`labels_as_imitation_batch`
(observations and actions for an optional imitation term).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pipeline_steps.infra.cli_common import add_common_args, context_from_args

if TYPE_CHECKING:
    from pipeline_steps.infra.context import StepContext
    from pipeline_steps.labels.store import LabelStore

# The computations live in pipeline_steps.labels.select (numpy, pandas, torch); they are importable
# from here too, loaded on first use so that registering the CLI stays light.
_SELECT = ("kmeans", "ClusterStat", "select_uncertain", "item_id", "queue_items", "label_config", "to_tasks",
           "parse_annotations", "expected_outcomes", "labels_as_pairs", "ImitationBatch", "labels_as_imitation_batch")


def __getattr__(name: str) -> Any:
    if name in _SELECT:
        from pipeline_steps.labels import select as label_select
        return getattr(label_select, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class QueueConfig:
    """The ``label_queue:`` block of params."""

    db_url: str = "sqlite:///rlops-data/label_queue.db"
    db_schema: str | None = None
    window_hours: float = 24.0
    threshold: float = 0.8
    clusters: int = 16
    states_per_cluster: int = 100
    min_cluster_states: int = 20
    bucket_minutes: int = 60
    min_bucket_states: int = 5
    kmeans_iters: int = 50
    seed: int = 7
    export_dir: str = "label_queue"

    @classmethod
    def from_section(cls, cfg: dict[str, Any]) -> "QueueConfig":
        unknown = sorted(set(cfg) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"params label_queue: unknown key(s) {unknown} (expected {sorted(cls.__dataclass_fields__)})")
        return cls(**{k: v for k, v in cfg.items() if v is not None})


# --------------------------------------------------------------------------- steps
def store_for(ctx: "StepContext", cfg: QueueConfig) -> "LabelStore":
    from pipeline_steps.labels.store import LabelStore
    return LabelStore(cfg.db_url, cfg.db_schema)


def label_queue_run(ctx: "StepContext", traces_uri: str | None = None) -> dict[str, Any]:
    """Enqueue the high-entropy clusters of the run key's window."""
    from pipeline_steps.labels.select import queue_items, select_uncertain
    from pipeline_steps.infra.trace_store import read_traces
    cfg = QueueConfig.from_section(ctx.section("label_queue"))
    pack = ctx.load_pack()
    window = ctx.key.lookback(cfg.window_hours)
    uri = traces_uri or ctx.traces.scenario_uri(ctx.scenario)
    df = read_traces(ctx.storage, uri, window)
    if not df.empty and "scenario" in df.columns:
        df = df[df["scenario"] == ctx.scenario].reset_index(drop=True)
    if not df.empty and "policy_version" in df.columns:
        # Entropy is a property of a learned policy: steps decided by the rule engine (before any
        # champion, or as a fallback) carry none and would read as perfectly certain.
        learned = df["policy_version"].astype(str) != "rules"
        if "fallback" in df.columns:
            learned &= ~df["fallback"].fillna(False).astype(bool)
        df = df[learned].reset_index(drop=True)
    missing = {"episode_id", "step", "ts", "action", "action_mask", "entropy"} - set(df.columns)
    if not df.empty and missing:
        raise ValueError(f"trace rows at {uri} lack column(s) {sorted(missing)}; expected the trace record")
    selected, stats = select_uncertain(pack, df, cfg)
    items = queue_items(pack, ctx.scenario, selected, df) if len(selected) else []
    result: dict[str, Any] = {"traces_uri": uri, "window": [str(w) for w in window] if window else None,
                              "rows_read": len(df), "clusters": len(stats),
                              "clusters_selected": [s.cluster_id for s in stats if s.selected],
                              "items": len(items), "dry_run": ctx.dry_run,
                              "cluster_stats": [asdict(s) for s in stats]}
    if ctx.dry_run:
        return result
    store = store_for(ctx, cfg)
    res = store.enqueue(ctx.scenario, ctx.run_key, items)
    result.update(asdict(res), queue=store.counts(ctx.scenario))
    return result


def label_queue_export(ctx: "StepContext", out_uri: str | None = None) -> dict[str, Any]:
    from pipeline_steps.labels.select import label_config, to_tasks
    from pipeline_steps.labels.store import EXPORTED
    cfg = QueueConfig.from_section(ctx.section("label_queue"))
    store = store_for(ctx, cfg)
    items = store.export_batch(ctx.scenario, ctx.run_key)
    uri = out_uri or ctx.uri(cfg.export_dir, ctx.scenario, f"tasks-{ctx.run_key}.json")
    result = {"tasks": len(items), "tasks_uri": uri, "config_uri": uri.rsplit("/", 1)[0] + "/label_config.xml",
              "dry_run": ctx.dry_run}
    if not ctx.dry_run:
        ctx.storage.write_json(uri, to_tasks(items))
        from sandbox.pack import load_pack  # the action names are all the config needs
        ctx.storage.write_text(result["config_uri"], label_config(load_pack(ctx.pack_dir, check_liveness=False)))
        store.mark(items["item_id"].tolist(), EXPORTED, export_key=ctx.run_key)
    return result


def label_queue_import(ctx: "StepContext", uri: str) -> dict[str, Any]:
    from pipeline_steps.labels.importing import import_export
    return import_export(ctx, store_for(ctx, QueueConfig.from_section(ctx.section("label_queue"))), uri)


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("label-queue", help="queue uncertain states for human labels; Label Studio export/import")
    lq = p.add_subparsers(dest="label_queue_command", required=True, metavar="ACTION")
    r = lq.add_parser("run", help="enqueue the latest states of high-entropy clusters")
    add_common_args(r)
    r.add_argument("--traces", help="trace parquet file or folder (default: the scenario's trace store)")
    e = lq.add_parser("export", help="write pending items as Label Studio tasks")
    add_common_args(e)
    e.add_argument("--out", help="output URI of the tasks JSON")
    i = lq.add_parser("import", help="ingest a Label Studio JSON export")
    add_common_args(i)
    i.add_argument("file", help="URI or path of the Label Studio export (JSON)")
    for q in (r, e, i):
        q.set_defaults(func=cmd_label_queue)


def cmd_label_queue(args: argparse.Namespace) -> int:
    from common.errors import UserError
    ctx = context_from_args(args)
    try:
        if args.label_queue_command == "run":
            result = label_queue_run(ctx, args.traces)
        elif args.label_queue_command == "export":
            result = label_queue_export(ctx, args.out)
        else:
            result = label_queue_import(ctx, args.file)
    except (ValueError, FileNotFoundError) as exc:
        raise UserError(f"label-queue {args.label_queue_command}: {exc}") from exc
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(", ".join(f"{k}={v}" for k, v in result.items() if not isinstance(v, (list, dict))))
    return 0

"""``rlops labels run | export | import``: send the states the policy is unsure about to people.

run
    Reads the window's trace rows, computes each state's masked policy entropy normalised by
    ``log(number of legal actions)`` (1 = uniform over the legal actions; states with a single
    legal action are skipped — there is nothing to choose), clusters the states and enqueues the
    latest ``states_per_cluster`` states of every cluster whose mean normalised entropy is above
    ``threshold`` in every time bucket of the window (``bucket_minutes``; buckets with fewer than
    ``min_bucket_states`` states of the cluster are not judged).

    Once the scenario has ``ensemble_min_labels`` finished labels (``selection: auto``; or always,
    ``selection: reward_ensemble``) the labels themselves say where the next ones are worth most:
    a bootstrap ensemble of reward models is fitted on them and the run enqueues the states whose
    best action the members disagree on, spread over the state clusters, part of the batch drawn in
    proportion to that disagreement (:mod:`rlops.pipeline_steps.labels.disagreement`); states already
    queued or labelled are left out. Policy entropy marks where the policy hesitates, which is
    not where a person's answer carries news (two equally good orders of the same checks); the
    ensemble's disagreement is. The run result says which selection was used (``selection``) and
    why each item was chosen (``items_by_reason``).

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

Labels feed training through :func:`rlops.pipeline_steps.labels.select.labels_as_pairs` (the labelled
action preferred over every other legal action, for the Bradley–Terry reward model) and
:func:`rlops.pipeline_steps.labels.select.labels_as_imitation_batch` (observations and actions for an
optional imitation term); the computations (clustering, selection, Label Studio tasks) live in
:mod:`rlops.pipeline_steps.labels.select`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rlops.common.params_model import QueueConfig  # the typed ``label_queue:`` params block
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.labels.disagreement import LabelledStates, select_disagreeing
from rlops.pipeline_steps.labels.importing import LabelImport, import_export
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.labels.select import (
    item_id,
    label_config,
    labels_as_choices,
    queue_items,
    select_uncertain,
    to_tasks,
)
from rlops.pipeline_steps.labels.store import EXPORTED, EnqueueResult, LabelStore
from rlops.pipeline_steps.labels.uncertainty import (
    EXCLUDED_RULE_ENGINE,
    EXCLUDED_SINGLE,
    RULES,
    count_single_choice,
    usable_rows,
)
from rlops.trace_store.states import STATE_PREFIX, mask_matrix

if TYPE_CHECKING:
    import pandas as pd

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.pipeline_steps.labels.disagreement import LabelledStates
    from rlops.pipeline_steps.labels.store import LabelStore
    from rlops.sandbox.pack import Pack


# --------------------------------------------------------------------------- steps
def store_for(ctx: StepServices, cfg: QueueConfig) -> LabelStore:

    return LabelStore(cfg.db_url, cfg.db_schema)


def finished_labels(services: StepServices, queue: QueueConfig) -> pd.DataFrame:
    """The label queue's finished labels of the scenario (an empty frame when there are none)."""
    store = store_for(services, queue)
    store.create()
    return store.labelled_frame(services.scenario)


EXCLUDED_QUEUED = "already queued or labelled"
#: The trace columns the queue reads, besides the ``state.*`` fields: the rest (the JSON reward
#: breakdowns alone are most of a day's bytes, shadow and bookkeeping columns) stays in the parquet,
#: so a day's window stays within a worker's memory.
LABEL_COLUMNS = frozenset(
    {"trace_id", "episode_id", "step", "ts", "scenario", "policy_version", "fallback"}
    | {"action", "action_mask", "entropy", "error"}
)


def label_columns(available: list[str]) -> list[str]:
    """The trace columns the label queue reads, of those the store has."""
    return [c for c in available if c in LABEL_COLUMNS or c.startswith(STATE_PREFIX)]


@dataclass
class WindowRows:
    """The window's rows the queue reads (:func:`window_rows`)."""

    rows: pd.DataFrame
    total: int
    """Rows in the window."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Rows not read, by reason (rule-engine rows when a learned policy's rows are there)."""
    trace_ids: bool = False
    """Whether the store has trace ids: looked up for the chosen rows only (:func:`with_trace_ids`)."""


def window_rows(ctx: StepServices, uri: str, window: tuple[Any, Any]) -> WindowRows:
    """The window's rows as the queue judges them, read in bounded memory: the columns of
    :func:`label_columns` but the trace id (unique per row; fetched for the chosen items alone).
    When a learned policy decided some of the window's steps, only its rows are read (the policy
    versions counted first, the others left out in the scan): the rule engine's rows are then
    excluded anyway (:func:`uncertainty.split_rows`), and counted as such here. Any other case
    (no learned rows, rows of other scenarios or without a version) reads every row."""
    reader = ctx.traces.reader
    cols = label_columns(reader.columns(uri))
    read_cols = [c for c in cols if c != "trace_id"]
    total = reader.count(uri, window)
    versions = reader.count_by(uri, "policy_version", window) if "policy_version" in cols else {}
    scenarios = reader.count_by(uri, "scenario", window) if "scenario" in cols else {}
    learned = [v for v in versions if v not in (RULES, "None")]
    if learned and set(scenarios) <= {ctx.scenario} and "None" not in versions:
        rows = reader.read(uri, window, read_cols, where={"policy_version": learned})
        left = {EXCLUDED_RULE_ENGINE: versions[RULES]} if versions.get(RULES) else {}
        return WindowRows(rows, total, left, "trace_id" in cols)
    return WindowRows(reader.read(uri, window, read_cols), total, {}, "trace_id" in cols)


def with_trace_ids(ctx: StepServices, uri: str, window: tuple[Any, Any], rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the trace id of each (episode, step), looked up by episode id (bloom filters)."""
    if rows.empty or "trace_id" in rows.columns:
        return rows
    ids = ctx.traces.reader.read(
        uri,
        window,
        ["episode_id", "step", "trace_id"],
        where={"episode_id": sorted(set(rows["episode_id"].astype(str)))},
    )
    if ids.empty:
        return rows.assign(trace_id=None)
    ids = ids.astype({"episode_id": str}).drop_duplicates(["episode_id", "step"])
    key = rows[["episode_id", "step"]].astype({"episode_id": str})
    got = key.merge(ids, on=["episode_id", "step"], how="left")["trace_id"]
    return rows.assign(trace_id=got.to_numpy())


def choice_rows(pack: Any, df: pd.DataFrame) -> pd.DataFrame:
    """The rows with at least two legal actions (what the selections judge), in order; the masks
    are checked as the selections check them."""
    if df.empty or "action_mask" not in df.columns:
        return df
    multi = mask_matrix(df["action_mask"], pack.scenario.n_actions).sum(axis=1) >= 2
    return df if bool(multi.all()) else df[multi].reset_index(drop=True)


def queue_selection(ctx: StepServices, pack: Any, cfg: QueueConfig) -> tuple[LabelledStates | None, str, set[str]]:
    """``(labelled states, description, item ids already in the queue)``: the finished labels the
    reward ensemble is fitted on, or None for entropy selection (``selection: entropy``, or
    ``auto`` with fewer than ``ensemble_min_labels`` finished labels)."""
    if cfg.selection == "entropy":
        return None, "entropy (label_queue.selection)", set()

    store = store_for(ctx, cfg)
    # a dry run creates no queue: without one there are no labels, and the choice below is made on that
    missing = ctx.dry_run and not store.exists()
    n_labels = 0 if missing else len(labels := store.labelled_frame(ctx.scenario))
    if cfg.selection == "auto" and n_labels < cfg.ensemble_min_labels:
        return (
            None,
            (
                f"entropy: {n_labels} finished label(s), the reward ensemble starts at "
                f"{cfg.ensemble_min_labels} (label_queue.ensemble_min_labels)"
            ),
            set(),
        )
    if n_labels < 2:
        raise ValueError(
            f"label_queue.selection is reward_ensemble but scenario {ctx.scenario} has {n_labels} "
            "finished label(s); the ensemble is fitted on them (at least 2): label the queue's first "
            "items (rlops labels export / import) or use selection auto or entropy"
        )
    obs, masks, chosen = labels_as_choices(pack, labels)
    known = set(store.items_frame(ctx.scenario)["item_id"].astype(str))
    return (
        LabelledStates(obs, masks, chosen),
        f"reward_ensemble: disagreement of {cfg.ensemble_members} reward models fitted on {len(labels)} "
        f"finished labels, {cfg.sample_fraction:.0%} of the items drawn in proportion to it",
        known,
    )


@dataclass(frozen=True)
class LabelQueueRun(StepResult):
    """The states of a window worth a human's label, and what the queue made of them."""

    traces_uri: str
    window: list[str] | None
    rows_read: int
    rows_judged: int
    """Rows with a real decision by a learned policy (the others are counted in ``rows_excluded``)."""
    rows_excluded: dict[str, int]
    """Rows left out, by why."""
    uncertainty_from: str
    """What measured uncertainty: the serving policy's entropy, or a registered candidate's."""
    selection: str
    """How items were chosen: policy entropy per cluster, or the reward ensemble's disagreement."""
    items_by_reason: dict[str, int]
    clusters: int
    clusters_selected: list[Any]
    clusters_by_threshold: list[Any]
    clusters_by_top_k: list[Any]
    items: int
    dry_run: bool
    cluster_stats: list[dict[str, Any]]
    enqueued: EnqueueResult
    """Inserted, pending items replaced, ids already queued (a dry run: what the enqueue would give)."""
    queue: dict[str, int] | str
    """The queue's counts by status after the enqueue (a dry run says why there are none)."""

    def as_dict(self) -> dict[str, Any]:
        """Flat, the enqueue's counts beside the run's (the JSON of ``rlops labels run``)."""
        out = super().as_dict()
        return {
            **{k: v for k, v in out.items() if k not in ("enqueued", "queue")},
            **out["enqueued"],
            "queue": self.queue,
        }


@dataclass(frozen=True)
class LabelQueueSetup:
    """One label-queue run's inputs, resolved where its request enters."""

    settings: QueueConfig
    """The params' ``label_queue:`` block with the request's options of the same name over it."""
    pack: Pack
    """The scenario pack, the latest calibration applied."""
    traces_uri: str
    """Where the window's trace rows are read: the request's ``traces``, else the scenario's trace store."""


def resolve_label_queue(ctx: StepContext, request: LabelQueueRequest | None = None) -> LabelQueueSetup:
    """The :class:`LabelQueueSetup` of ``request`` in the run of ``ctx``."""
    request = request or LabelQueueRequest()
    settings = request.settings(ctx.config.label_queue)
    pack = ctx.load_pack()
    return LabelQueueSetup(settings, pack, request.traces or ctx.traces.scenario_uri(ctx.scenario))


def label_queue_run(ctx: StepContext, request: LabelQueueRequest | None = None) -> LabelQueueRun:
    """Enqueue the states worth labelling in the run key's window (policy entropy, or the reward
    ensemble's disagreement once labels are finished: see the module docstring)."""
    return enqueue_window(ctx, resolve_label_queue(ctx, request))


def enqueue_window(services: StepServices, setup: LabelQueueSetup) -> LabelQueueRun:
    """:func:`label_queue_run`'s work on its resolved inputs."""
    import pandas as pd

    cfg, pack, uri = setup.settings, setup.pack, setup.traces_uri
    window = services.key.lookback(cfg.window_hours)
    read = window_rows(services, uri, window)
    raw = read.rows
    missing = {"episode_id", "step", "ts", "action", "action_mask"} - set(raw.columns)
    if not raw.empty and missing:
        raise ValueError(f"trace rows at {uri} lack column(s) {sorted(missing)}; expected the trace record")
    # Entropy is a property of a learned policy: rule-engine steps carry none (they would read as
    # perfectly certain); before any champion a registered candidate's entropy is computed instead.
    usable = usable_rows(services, pack, raw, cfg.uncertainty_policy)
    if read.left_out and usable.rows.empty:  # every learned-policy row was a fallback: judge them all
        read = WindowRows(services.traces.reader.read(uri, window, list(raw.columns)), read.total, {}, read.trace_ids)
        raw = read.rows
        usable = usable_rows(services, pack, raw, cfg.uncertainty_policy)
    df = usable.rows
    if not df.empty and "entropy" not in df.columns:
        raise ValueError(f"trace rows at {uri} lack the entropy column; expected the trace record")
    excluded = {**read.left_out, **usable.excluded}
    single = count_single_choice(df)
    if single:
        excluded[EXCLUDED_SINGLE] = single
    # the items' histories look at every step of their episodes; the selection only at steps with a
    # choice: the frame is narrowed to those once, and the window's other copies let go
    history = df[["episode_id", "step", "action"]] if not df.empty else df
    df = choice_rows(pack, df)
    read.rows = usable.rows = df
    del raw
    labelled, selection, known = queue_selection(services, pack, cfg)
    if labelled is None:
        selected, stats = select_uncertain(pack, df, cfg)
    else:
        fresh = pd.Series(
            [
                item_id(services.scenario, e, s) not in known
                for e, s in zip(df.get("episode_id", []), df.get("step", []))
            ],
            index=df.index,
            dtype=bool,
        )
        if int((~fresh).sum()):
            excluded[EXCLUDED_QUEUED] = int((~fresh).sum())
        selected, stats = select_disagreeing(pack, df[fresh].reset_index(drop=True), labelled, cfg)
    if read.trace_ids:
        selected = with_trace_ids(services, uri, window, selected)
    items = queue_items(pack, services.scenario, selected, history) if len(selected) else []
    store = store_for(services, cfg)
    # a dry run: the counts the enqueue would give, read without writing
    plan_or_enqueue = store.plan_enqueue if services.dry_run else store.enqueue
    enqueued = plan_or_enqueue(services.scenario, services.run_key, items)
    return LabelQueueRun(
        traces_uri=uri,
        window=[str(w) for w in window] if window else None,
        rows_read=read.total,
        rows_judged=len(df),
        rows_excluded=excluded,
        uncertainty_from=usable.uncertainty_from,
        selection=selection,
        items_by_reason=(
            {} if "why" not in selected.columns else {str(k): int(v) for k, v in selected["why"].value_counts().items()}
        ),
        clusters=len(stats),
        clusters_selected=[s.cluster_id for s in stats if s.selected],
        clusters_by_threshold=[s.cluster_id for s in stats if s.why == "threshold"],
        clusters_by_top_k=[s.cluster_id for s in stats if s.why == "top_k"],
        items=len(items),
        dry_run=services.dry_run,
        cluster_stats=[asdict(s) for s in stats],
        enqueued=enqueued,
        queue=(
            "not computed: the queue's counts after an enqueue a dry run skips"
            if services.dry_run
            else store.counts(services.scenario)
        ),
    )


@dataclass(frozen=True)
class LabelExport(StepResult):
    """The batch of queued items sent to Label Studio, and where its tasks and label config are."""

    tasks: int
    tasks_uri: str
    config_uri: str
    dry_run: bool


def label_queue_export(ctx: StepContext, out_uri: str | None = None) -> LabelExport:
    """Export the queued items not sent yet as Label Studio tasks (and its label config); mark them
    exported, so nothing is sent twice."""
    cfg = ctx.config.label_queue
    store = store_for(ctx, cfg)
    if ctx.dry_run and not store.exists():  # export_batch would create the queue: without one, nothing to export
        import pandas as pd

        items = pd.DataFrame(columns=[c.name for c in store.items.columns])
    else:
        items = store.export_batch(ctx.scenario, ctx.run_key)
    uri = out_uri or ctx.uri(cfg.export_dir, ctx.scenario, f"tasks-{ctx.run_key}.json")
    result = LabelExport(len(items), uri, uri.rsplit("/", 1)[0] + "/label_config.xml", ctx.dry_run)
    if not ctx.dry_run:
        from rlops.sandbox.pack import load_pack  # action names, field units

        pack = load_pack(ctx.pack_dir, check_liveness=False)
        ctx.storage.write_json(uri, to_tasks(items, pack))
        ctx.storage.write_text(result.config_uri, label_config(pack))
        store.mark(items["item_id"].tolist(), EXPORTED, export_key=ctx.run_key)
    return result


def label_queue_import(ctx: StepContext, uri: str) -> LabelImport:
    """Store the labels of the Label Studio export at ``uri`` (see
    :func:`rlops.pipeline_steps.labels.importing.import_export`)."""
    return import_export(ctx, store_for(ctx, ctx.config.label_queue), uri)

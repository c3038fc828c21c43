"""Reading a Label Studio JSON export into labels: every task is checked field by field, so a
malformed task is rejected with its reason (never a crash), and two tasks that give one item
different labels are a conflict — reported with both annotations and stored for nobody, instead
of the last one winning silently.

Every annotator's answer counts: two annotators on one task (or on two tasks of one item) who
agree give the item its label with both recorded as its annotators; who disagree are a conflict.
"Newest" is compared as instants (``2026-01-05T12:00+02:00`` is older than ``2026-01-05T11:00Z``),
never as text. Within one task, an annotator's newer annotation supersedes their older one.

The result of :func:`parse_annotations` is ``(labels, rejected, not_annotated, conflicts)``:

* ``labels``: ``{"item_id", "label", "annotator", "labelled_at", "annotations"}`` per item, at most
  one each; ``annotator`` names every annotator who gave it (comma-separated), ``annotations`` holds
  each one's answer;
* ``rejected``: ``{"task", "item_id", "reason"}`` per task that could not be read;
* ``not_annotated``: how many tasks have no (uncancelled) annotation;
* ``conflicts``: ``{"item_id", "labels": [{"task", "label", "annotator", "labelled_at"}, ...]}``
  per item that the export labels in more than one way; the item keeps whatever label it had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import pandas as pd

from rlops.common.errors import UserError
from rlops.common.step_result import StepResult
from rlops.storage.backend import normalize_uri

Label = dict[str, Any]


class TaskError(ValueError):
    """One task of an export that cannot be read (the message says what and where)."""


def _field(obj: Any, key: str, kind: type | tuple[type, ...], where: str, *, optional: bool = True) -> Any:
    """``obj[key]`` checked to be a ``kind`` (None allowed when ``optional``)."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if value is None:
        if optional:
            return None
        raise TaskError(f"{where}: '{key}' is missing")
    if (
        not isinstance(value, kind)
        or isinstance(value, bool)
        and bool not in (kind if isinstance(kind, tuple) else (kind,))
    ):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TaskError(f"{where}: '{key}' is a {type(value).__name__}, expected {names}")
    return value


def _time(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TaskError(f"{where}: time {value!r} is a {type(value).__name__}, expected ISO-8601 text")
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        ts = pd.NaT
    if pd.isna(ts):
        raise TaskError(f"{where}: time {value!r} is not ISO-8601 (e.g. 2026-11-30T05:00:00Z)")
    return value


def _annotator(ann: Mapping[str, Any]) -> str | None:
    who = ann.get("completed_by")
    if isinstance(who, Mapping):
        who = who.get("email") or who.get("id")
    if who is None or isinstance(who, (str, int)) and not isinstance(who, bool):
        return None if who is None else str(who)
    raise TaskError(f"'completed_by' is a {type(who).__name__}, expected a user id, e-mail or object")


def instant(value: Any) -> pd.Timestamp | None:
    """An ISO-8601 time as a UTC instant (a time without a zone is UTC); None when missing."""
    if value is None:
        return None
    ts = pd.Timestamp(value)
    if pd.isna(ts):
        return None
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _newest_key(lab: Label) -> tuple[int, pd.Timestamp, int]:
    ts = instant(lab.get("labelled_at"))
    return (0, pd.Timestamp.min.tz_localize("UTC"), 0) if ts is None else (1, ts, int(lab.get("_id") or 0))


def read_task(n: int, task: Any, legal: Mapping[str, set[str]], choice_name: str) -> list[Label]:
    """One task → one label per annotator (their newest annotation), ``[]`` when it has no
    annotation; :class:`TaskError` when any annotation cannot be read."""
    where = f"task {n}"
    if not isinstance(task, Mapping):
        raise TaskError(f"{where}: is a {type(task).__name__}, expected a JSON object")
    data = _field(task, "data", Mapping, where, optional=False)
    iid = _field(data, "item_id", str, f"{where} data", optional=False)
    where = f"task {n} (item {iid})"
    anns = _field(task, "annotations", list, where) or []
    for k, a in enumerate(anns):
        if not isinstance(a, Mapping):
            raise TaskError(f"{where}: annotation {k} is a {type(a).__name__}, expected a JSON object")
    anns = [a for a in anns if not a.get("was_cancelled")]
    if not anns:
        return []
    if iid not in legal:
        raise TaskError(f"{where}: item_id {iid!r} is not in the label queue of this scenario")
    for a in anns:
        for key in ("updated_at", "created_at"):
            _time(a.get(key), f"{where} annotation {key}")
    newest: dict[str | None, Label] = {}
    for k, ann in enumerate(anns):
        label = _read_annotation(ann, f"{where} annotation {k}", iid, legal, choice_name)
        who = label["annotator"]
        if who not in newest or _newest_key(label) >= _newest_key(newest[who]):
            newest[who] = label
    return list(newest.values())


def _read_annotation(
    ann: Mapping[str, Any], where: str, iid: str, legal: Mapping[str, set[str]], choice_name: str
) -> Label:
    results = _field(ann, "result", list, where) or []
    choice = None
    for res in results:
        if isinstance(res, Mapping) and res.get("from_name") == choice_name and res.get("type", "choices") == "choices":
            choices = _field(res, "value", Mapping, f"{where} result", optional=False).get("choices")
            if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
                raise TaskError(f"{where}: '{choice_name}' choices are {choices!r}, expected a list of action names")
            choice = choices
            break
    if not choice:
        raise TaskError(f"{where}: the annotation has no '{choice_name}' choice")
    if len(set(choice)) > 1:
        raise TaskError(f"{where}: the annotation chose {len(set(choice))} actions {choice}, expected one")
    if choice[0] not in legal[iid]:
        raise TaskError(f"{where}: label {choice[0]!r} is not a legal action there ({sorted(legal[iid])})")
    try:
        who = _annotator(ann)
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from None
    return {
        "item_id": iid,
        "label": choice[0],
        "annotator": who,
        "labelled_at": ann.get("updated_at") or ann.get("created_at"),
        "_id": ann.get("id") if isinstance(ann.get("id"), int) and not isinstance(ann.get("id"), bool) else 0,
    }


def parse_annotations(
    tasks: Any, items: pd.DataFrame, choice_name: str = "action"
) -> tuple[list[Label], list[dict[str, Any]], int, list[dict[str, Any]]]:
    """``(labels, rejected, not_annotated, conflicts)`` from a Label Studio JSON export (see the
    module docstring). A top-level shape other than a list of tasks is a ``ValueError``."""
    if not isinstance(tasks, list):
        raise ValueError(f"a Label Studio export is a JSON list of tasks (Export → JSON); got {type(tasks).__name__}")
    legal = {r.item_id: set(json.loads(r.candidate_actions)) for r in items.itertuples(index=False)}
    by_item: dict[str, list[tuple[int, Label]]] = {}  # every annotator's answer, by item
    rejected: list[dict[str, Any]] = []
    empty = 0
    for n, task in enumerate(tasks):
        try:
            found_here = read_task(n, task, legal, choice_name)
        except TaskError as exc:
            data = task.get("data") if isinstance(task, Mapping) else None
            iid = data.get("item_id") if isinstance(data, Mapping) else None
            rejected.append({"task": n, "item_id": iid if isinstance(iid, str) else None, "reason": str(exc)})
            continue
        if not found_here:
            empty += 1
            continue
        for label in found_here:
            by_item.setdefault(label["item_id"], []).append((n, label))
    labels: list[Label] = []
    conflicts: list[dict[str, Any]] = []
    for iid, found in by_item.items():
        # Each task holds one answer per annotator (their newest there); across tasks every answer counts.
        answers = sorted(found, key=lambda x: _newest_key(x[1]))
        if len({lab["label"] for _, lab in answers}) == 1:
            newest = answers[-1][1]
            who = sorted({str(lab["annotator"]) for _, lab in answers if lab["annotator"] is not None})
            labels.append(
                {
                    "item_id": iid,
                    "label": newest["label"],
                    "annotator": ", ".join(who) or None,
                    "labelled_at": newest["labelled_at"],
                    "annotations": [_public(lab) for _, lab in answers],
                }
            )
        else:
            conflicts.append({"item_id": iid, "labels": [{"task": n, **_public(lab)} for n, lab in answers]})
    return labels, rejected, empty, conflicts


def _public(lab: Label) -> Label:
    return {k: v for k, v in lab.items() if k not in ("item_id", "_id")}


@dataclass(frozen=True)
class LabelImport(StepResult):
    """What one Label Studio export brought: labels stored, and what was refused and why."""

    tasks_in: int
    labels: int
    """Annotations read."""
    ingested: int
    """Labels stored (one per item; a re-import replaces, never duplicates)."""
    rejected: list[dict[str, Any]]
    """Annotations refused, each with its reason (not a legal action, unknown item, …)."""
    not_annotated: int
    conflicts: list[dict[str, Any]]
    """Items labelled differently by different annotators: not applied."""
    conflicts_uri: str | None
    """Where the conflicts are listed for resolving in Label Studio (None: none, or a dry run)."""
    stale: list[dict[str, Any]]
    """Labels older than the stored label of their item: not applied."""
    dry_run: bool


def import_export(ctx: Any, store: Any, uri: str) -> LabelImport:
    """Read the export at ``uri``, store its labels and say what was rejected and what conflicts.
    Conflicts are written to ``labels/conflicts/scenario=<s>/<run_key>.json`` under the storage
    root (not in a dry run) so they can be resolved in Label Studio; the items keep their label."""
    local = normalize_uri(uri)
    if local.startswith("file://"):
        import stat
        from pathlib import Path

        path = Path(local[len("file://") :])
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = None  # missing: the read below says so
        if mode is not None and not stat.S_ISREG(mode):
            kind = "folder" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "special file"
            raise UserError(
                f"label import {uri}: is a {kind}, expected a regular file holding a Label Studio "
                "JSON export (Export → JSON)"
            )
    try:
        tasks = ctx.storage.read_json(uri)
    except ValueError as exc:  # not JSON at all (a StorageError for a missing file passes through)
        raise UserError(
            f"label import {uri}: the file is not JSON ({exc}); expected a Label Studio JSON export (Export → JSON)"
        ) from None
    try:
        labels, rejected, empty, conflicts = parse_annotations(tasks, store.items_frame(ctx.scenario))
    except ValueError as exc:
        raise UserError(f"label import {uri}: {exc}") from None
    conflicts_uri = None
    if conflicts and not ctx.dry_run:
        conflicts_uri = ctx.storage.join("labels", "conflicts", f"scenario={ctx.scenario}", f"{ctx.run_key}.json")
        append_conflicts(ctx.storage, conflicts_uri, uri, conflicts)
    stale = store.stale_labels(ctx.scenario, labels)
    fresh = [lab for lab in labels if lab["item_id"] not in {s["item_id"] for s in stale}]
    # a dry run counts what add_labels would store: one label per item id
    ingested = len({lab["item_id"] for lab in fresh}) if ctx.dry_run else store.add_labels(ctx.scenario, fresh)
    return LabelImport(
        tasks_in=len(tasks),
        labels=len(labels),
        ingested=ingested,
        rejected=rejected,
        not_annotated=empty,
        conflicts=conflicts,
        conflicts_uri=conflicts_uri,
        stale=stale,
        dry_run=ctx.dry_run,
    )


def append_conflicts(storage: Any, conflicts_uri: str, source: str, conflicts: list[dict[str, Any]]) -> None:
    """Add one import's conflicts to the run key's conflicts file (``{"imports": [...]}``): a second
    import never overwrites what an earlier one reported."""
    from datetime import datetime

    imports: list[dict[str, Any]] = []
    if storage.exists(conflicts_uri):
        old = storage.read_json(conflicts_uri)
        if isinstance(old, dict) and isinstance(old.get("imports"), list):
            imports = old["imports"]
        elif isinstance(old, dict) and "conflicts" in old:  # the one-import layout of earlier versions
            imports = [{"source": old.get("source"), "conflicts": old["conflicts"]}]
    imports.append({"source": source, "imported_at": datetime.now(UTC).isoformat(), "conflicts": conflicts})
    storage.write_json(
        conflicts_uri, {"imports": imports, "conflicts": [c for imp in imports for c in imp["conflicts"]]}
    )

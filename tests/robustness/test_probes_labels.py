"""Label-import probes: malformed Label Studio tasks next to a good one. Each malformed task is
rejected with a reason naming what is wrong, the good one is kept, nothing raises; two tasks that
label one item differently are a conflict, reported with both labels and applied to neither. The
file-level probes go through ``rlops labels import``. One test per probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from .io_harness import IOProbe, Verdict, check, expect_cli_error, ids, run_probe

ITEMS = pd.DataFrame({"item_id": ["it-1", "it-2"], "candidate_actions": [json.dumps(["approve", "reject"])] * 2})


def task(iid: Any = "it-1", choice: Any = ("approve",), **over: Any) -> dict[str, Any]:
    ann = {
        "id": 1,
        "completed_by": {"email": "a@example.com"},
        "updated_at": "2026-01-05T10:00:00Z",
        "result": [{"from_name": "action", "type": "choices", "value": {"choices": list(choice)}}],
    }
    ann.update(over.pop("ann", {}))
    t: dict[str, Any] = {"id": 7, "data": {"item_id": iid}, "annotations": [ann]}
    t.update(over)
    return t


GOOD = task("it-2", ("reject",))


def malformed(id: str, bad: Any, mention: str) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        from rlops.pipeline_steps.labels.importing import parse_annotations

        labels, rejected, empty, conflicts = parse_annotations([bad, GOOD], ITEMS)
        if [lab["item_id"] for lab in labels] != ["it-2"]:
            return ("accepted" if len(labels) > 1 else "lost"), f"labels {labels}"
        if len(rejected) != 1 or mention not in rejected[0]["reason"]:
            return "accepted", f"rejected {rejected} (expected one naming {mention!r})"
        return None if not conflicts else ("accepted", f"conflicts {conflicts}")

    return IOProbe(f"task_{id}", run)


def result(value: Any) -> dict[str, Any]:
    return {"ann": {"result": value}}


TASK_PROBES = [
    malformed("not_an_object", "just text", "expected a JSON object"),
    malformed("list_task", [1, 2], "expected a JSON object"),
    malformed("null_task", None, "expected a JSON object"),
    malformed("no_data", {"annotations": []}, "'data' is missing"),
    malformed("data_text", {"data": "it-1"}, "'data' is a str"),
    malformed("item_id_missing", {"data": {}}, "'item_id' is missing"),
    malformed("item_id_number", task(17), "'item_id' is a int"),
    malformed("item_id_list", task(["it-1"]), "'item_id' is a list"),
    malformed("item_unknown", task("it-999"), "not in the label queue"),
    malformed("annotations_text", task(annotations="done"), "'annotations' is a str"),
    malformed("annotation_text", task(annotations=["approve"]), "annotation 0 is a str"),
    malformed("result_text", task(**result("approve")), "'result' is a str"),
    malformed("result_without_choice", task(**result([])), "no 'action' choice"),
    malformed("value_missing", task(**result([{"from_name": "action", "type": "choices"}])), "'value' is missing"),
    malformed(
        "choices_text",
        task(**result([{"from_name": "action", "type": "choices", "value": {"choices": "approve"}}])),
        "expected a list",
    ),
    malformed("choices_numbers", task(choice=(1,)), "expected a list of action names"),
    malformed("choices_two_actions", task(choice=("approve", "reject")), "expected one"),
    malformed("label_illegal", task(choice=("launch_rocket",)), "not a legal action"),
    malformed("updated_at_garbage", task(ann={"updated_at": "last tuesday"}), "not ISO-8601"),
    malformed("updated_at_number", task(ann={"updated_at": 12345}), "expected ISO-8601 text"),
    malformed("completed_by_list", task(ann={"completed_by": ["a", "b"]}), "'completed_by' is a list"),
]


def _conflict(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    labels, rejected, _, conflicts = parse_annotations(
        [task("it-1", ("approve",)), task("it-1", ("reject",), ann={"updated_at": "2026-01-06T00:00:00Z"}), GOOD], ITEMS
    )
    if any(lab["item_id"] == "it-1" for lab in labels):
        return "accepted", f"one of two conflicting labels won: {labels}"
    if len(conflicts) != 1 or sorted(c["label"] for c in conflicts[0]["labels"]) != ["approve", "reject"]:
        return "lost", f"the conflict is not reported with both labels: {conflicts}"
    return None


def _agreeing_duplicates(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    labels, _, _, conflicts = parse_annotations([task("it-1"), task("it-1"), GOOD], ITEMS)
    ok = sorted(lab["item_id"] for lab in labels) == ["it-1", "it-2"] and not conflicts
    return None if ok else ("lost", f"labels {labels}, conflicts {conflicts}")


def _cancelled_only(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    labels, rejected, empty, _ = parse_annotations([task(ann={"was_cancelled": True}), GOOD], ITEMS)
    return None if (len(labels), len(rejected), empty) == (1, 0, 1) else ("lost", f"{labels} {rejected} {empty}")


def _export_not_a_list(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    try:
        parse_annotations({"tasks": []}, ITEMS)
    except ValueError as exc:
        return None if "JSON list of tasks" in str(exc) else ("accepted", str(exc))
    return "accepted", "a JSON object was read as an export"


# --------------------------------------------------------------------------- through the CLI


def cli_import(id: str, content: str | None, mentions: tuple[str, ...]) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        path = tmp / "export.json"
        if content is not None:
            path.write_text(content)
        return expect_cli_error(["labels", "import", str(path), "--scenario", "credit_approval"], 2, mentions)

    return IOProbe(f"cli_import_{id}", run)


# --------------------------------------------------------------------------- labels over time


def two(iid: str, *answers: tuple[str, str, str]) -> dict[str, Any]:
    """One task of ``iid`` with one annotation per ``(annotator, action, updated_at)``."""
    t = task(iid)
    t["annotations"] = [
        {
            "id": k + 1,
            "completed_by": {"email": who},
            "updated_at": at,
            "result": [{"from_name": "action", "type": "choices", "value": {"choices": [act]}}],
        }
        for k, (who, act, at) in enumerate(answers)
    ]
    return t


def _two_annotators_agree(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    labels, _, _, conflicts = parse_annotations(
        [two("it-1", ("a@x", "approve", "2026-01-05T10:00:00Z"), ("b@x", "approve", "2026-01-05T10:05:00Z"))], ITEMS
    )
    if conflicts or len(labels) != 1:
        return "lost", f"labels {labels}, conflicts {conflicts}"
    got = labels[0]
    ok = got["annotator"] == "a@x, b@x" and len(got["annotations"]) == 2
    return None if ok else ("lost", f"one annotator's label dropped: {got}")


def _two_annotators_disagree(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    labels, _, _, conflicts = parse_annotations(
        [two("it-1", ("a@x", "approve", "2026-01-05T10:00:00Z"), ("b@x", "reject", "2026-01-05T10:05:00Z"))], ITEMS
    )
    if labels:
        return "accepted", f"one of two annotators won: {labels}"
    got = sorted(c["label"] for c in conflicts[0]["labels"]) if conflicts else []
    return None if got == ["approve", "reject"] else ("lost", f"conflicts {conflicts}")


def _newest_across_zones(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.labels.importing import parse_annotations

    # 12:00+02:00 is 10:00 UTC: older than 11:00Z, though it sorts after it as text.
    labels, _, _, _ = parse_annotations(
        [two("it-1", ("a@x", "approve", "2026-01-05T12:00:00+02:00"), ("a@x", "reject", "2026-01-05T11:00:00Z"))], ITEMS
    )
    got = labels[0]["label"] if labels else None
    return None if got == "reject" else ("accepted", f"the older annotation won: {labels}")


class _Ctx:
    def __init__(self, tmp: Path, run_key: str = "20260105T1000") -> None:
        from rlops.storage.backend import Storage

        self.storage = Storage(f"file://{tmp / 'store'}")
        self.scenario, self.run_key, self.dry_run = "credit_approval", run_key, False


def _store(tmp: Path) -> Any:
    from rlops.pipeline_steps.labels.store import LabelStore

    store = LabelStore(f"sqlite:///{tmp / 'queue.db'}")
    store.enqueue(
        "credit_approval",
        "20260105T1000",
        [
            {"item_id": iid, "state": {}, "candidate_actions": ["approve", "reject"], "action_mask": "11"}
            for iid in ("it-1", "it-2")
        ],
    )
    return store


def _import(tmp: Path, store: Any, tasks: list[Any], name: str) -> dict[str, Any]:
    from rlops.pipeline_steps.labels.importing import import_export

    path = tmp / name
    path.write_text(json.dumps(tasks))
    return import_export(_Ctx(tmp), store, f"file://{path}").as_dict()


def _older_export_does_not_relabel(tmp: Path) -> Verdict:
    store = _store(tmp)
    _import(tmp, store, [two("it-1", ("a@x", "reject", "2026-01-06T10:00:00Z"))], "new.json")
    res = _import(tmp, store, [two("it-1", ("a@x", "approve", "2026-01-05T10:00:00Z"))], "old.json")
    got = store.labelled_frame("credit_approval")["label"].tolist()
    if got != ["reject"]:
        return "accepted", f"an older export relabelled the item: {got}"
    return None if len(res["stale"]) == 1 else ("lost", f"the refused label is not reported: {res}")


def _older_across_zones_does_not_relabel(tmp: Path) -> Verdict:
    store = _store(tmp)
    _import(tmp, store, [two("it-1", ("a@x", "reject", "2026-01-05T11:00:00Z"))], "new.json")
    _import(tmp, store, [two("it-1", ("a@x", "approve", "2026-01-05T12:00:00+02:00"))], "old.json")
    got = store.labelled_frame("credit_approval")["label"].tolist()
    return None if got == ["reject"] else ("accepted", f"10:00Z replaced 11:00Z: {got}")


def _newer_export_relabels(tmp: Path) -> Verdict:
    store = _store(tmp)
    _import(tmp, store, [two("it-1", ("a@x", "approve", "2026-01-05T10:00:00Z"))], "old.json")
    _import(tmp, store, [two("it-1", ("a@x", "reject", "2026-01-06T10:00:00Z"))], "new.json")
    got = store.labelled_frame("credit_approval")["label"].tolist()
    return None if got == ["reject"] else ("lost", f"a newer label was refused: {got}")


def _both_votes_stored(tmp: Path) -> Verdict:
    store = _store(tmp)
    _import(
        tmp,
        store,
        [two("it-1", ("a@x", "approve", "2026-01-05T10:00:00Z"), ("b@x", "approve", "2026-01-05T10:01:00Z"))],
        "e.json",
    )
    votes = store.votes_frame("credit_approval")
    return None if sorted(votes["annotator"]) == ["a@x", "b@x"] else ("lost", f"votes {votes.to_dict('records')}")


def _conflicts_appended(tmp: Path) -> Verdict:
    store = _store(tmp)
    first = _import(
        tmp,
        store,
        [two("it-1", ("a@x", "approve", "2026-01-05T10:00:00Z"), ("b@x", "reject", "2026-01-05T10:01:00Z"))],
        "one.json",
    )
    _import(
        tmp,
        store,
        [two("it-2", ("a@x", "approve", "2026-01-05T10:00:00Z"), ("b@x", "reject", "2026-01-05T10:01:00Z"))],
        "two.json",
    )
    path = Path(first["conflicts_uri"][len("file://") :])
    got = json.loads(path.read_text())
    items = sorted(c["item_id"] for c in got.get("conflicts", []))
    return (
        None
        if items == ["it-1", "it-2"] and len(got.get("imports", [])) == 2
        else ("lost", f"the second import overwrote the first's conflicts: {items}")
    )


def _fifo_export(tmp: Path) -> Verdict:
    import os

    path = tmp / "export.json"
    os.mkfifo(path)
    return expect_cli_error(["labels", "import", str(path), "--scenario", "credit_approval"], 2, ("FIFO",))


def _folder_export(tmp: Path) -> Verdict:
    (tmp / "export.json").mkdir()
    return expect_cli_error(
        ["labels", "import", str(tmp / "export.json"), "--scenario", "credit_approval"], 2, ("folder",)
    )


PROBES = [
    *TASK_PROBES,
    IOProbe("two_annotators_agree_both_kept", _two_annotators_agree),
    IOProbe("two_annotators_disagree_is_a_conflict", _two_annotators_disagree),
    IOProbe("newest_compared_as_instants", _newest_across_zones),
    IOProbe("older_export_does_not_relabel", _older_export_does_not_relabel),
    IOProbe("older_across_zones_does_not_relabel", _older_across_zones_does_not_relabel),
    IOProbe("newer_export_relabels", _newer_export_relabels),
    IOProbe("both_annotators_votes_stored", _both_votes_stored),
    IOProbe("second_conflicting_import_appends", _conflicts_appended),
    IOProbe("cli_import_fifo", _fifo_export, timeout_s=20),
    IOProbe("cli_import_folder", _folder_export),
    IOProbe("conflicting_labels_reported_not_overwritten", _conflict),
    IOProbe("agreeing_duplicates_kept_once", _agreeing_duplicates),
    IOProbe("cancelled_annotation_not_a_label", _cancelled_only),
    IOProbe("export_not_a_list", _export_not_a_list),
    cli_import("missing_file", None, ("export.json",)),
    cli_import("not_json", "{not json", ("not JSON",)),
    cli_import("json_object", '{"tasks": []}', ("JSON list of tasks",)),
    cli_import("empty_file", "", ("not JSON",)),
]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_label_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

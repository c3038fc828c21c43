"""Trace-source probes: OTLP/JSON exports and MLflow traces go through the landing zone's one
writer, so its rules hold for them: rows outside the interval and duplicates quarantined (also
against what another source of the run key captured), a second export for the run key adds and a
re-run of one export replaces only its own rows, decision spans counted at any depth, a bad span
quarantined alone, a broken document quarantined where it breaks, memory bounded by streaming, and a
misnamed MLflow experiment an error — never "0 rows". One test per probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from .capture_kit import END, SCENARIO, START, capture, contract, line, record, write_file
from .io_harness import IOProbe, Verdict, check, expect_error, ids, run_probe


def span(
    rec: dict[str, Any] | None,
    trace: str = "t1",
    sid: str = "s1",
    parent: str = "",
    name: str = "decision",
    **attrs: str,
) -> dict[str, Any]:
    a = dict(attrs)
    if rec is not None:
        a["rlops.record"] = json.dumps(rec)
    return {
        "traceId": trace,
        "spanId": sid,
        "parentSpanId": parent,
        "name": name,
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in a.items()],
    }


def doc(spans: list[Any]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "rlops"}, "spans": spans}]}
        ]
    }


def export(tmp: Path, spans: list[Any], name: str = "spans.json", lines: bool = False) -> str:
    path = tmp / name
    if lines:  # the collector's file exporter: one document per line
        path.write_text("".join(json.dumps(doc([s])) + "\n" for s in spans))
    else:
        path.write_text(json.dumps(doc(spans)))
    return f"file://{path}"


def otlp(tmp: Path, uri: str, **kw: Any) -> Any:
    from rlops.pipeline_steps.capture.core import write_capture
    from rlops.pipeline_steps.capture.trace_sources import otlp_source
    from rlops.storage.backend import Storage

    storage = Storage(f"file://{tmp}", retries=1)
    return write_capture(
        storage, otlp_source(storage, uri), f"file://{tmp / 'traces'}", SCENARIO, contract(), START, END, **kw
    )


def stored(tmp: Path) -> list[tuple[str, int]]:
    files = sorted((tmp / "traces").rglob("*.parquet"))
    if not files:
        return []
    import pandas as pd

    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return sorted(zip(df["episode_id"], df["step"].astype(int)))


def quarantine_reasons(tmp: Path) -> list[str]:
    import pandas as pd

    files = sorted((tmp / "quarantine").rglob("*.parquet"))
    return [r for f in files for r in pd.read_parquet(f)["quarantine_reason"]]


def counts(res: Any, rows_in: int, accepted: int) -> Verdict:
    if res.rows_in != res.rows_accepted + res.rows_quarantined:
        return "lost", f"{res.rows_in} in != {res.rows_accepted} + {res.rows_quarantined}"
    if res.rows_in != rows_in:
        return "lost", f"{res.rows_in} rows in, expected {rows_in}"
    if res.rows_accepted != accepted:
        return (
            "accepted" if res.rows_accepted > accepted else "lost"
        ), f"{res.rows_accepted} accepted, expected {accepted}"
    return None


def _needs(reason: str, tmp: Path) -> Verdict:
    got = quarantine_reasons(tmp)
    return None if any(reason in r for r in got) else ("accepted", f"no quarantine reason mentions {reason!r}: {got}")


def _duplicate(tmp: Path) -> Verdict:
    res = otlp(tmp, export(tmp, [span(record(0, "a"), "t1"), span(record(0, "a"), "t2")]))
    return counts(res, 2, 1) or _needs("duplicate", tmp)


def _outside_interval(tmp: Path) -> Verdict:
    res = otlp(tmp, export(tmp, [span(record(0, "a")), span(record(1, "a", ts="2026-01-07T03:00:00Z"), "t2")]))
    folders = sorted({p.name for p in tmp.rglob("date=*")})
    bad = counts(res, 2, 1) or _needs("interval", tmp)
    return bad or (None if folders == ["date=2026-01-05"] else ("accepted", f"rows written into {folders}"))


def _nested_decision(tmp: Path) -> Verdict:
    spans = [
        span(None, "t1", "root", name="POST /decide", **{"http.route": "/decide"}),
        span(record(0, "a"), "t1", "d1", parent="root"),
        span(None, "t1", "c1", parent="d1", name="observe"),
    ]
    res = otlp(tmp, export(tmp, spans))
    bad = counts(res, 1, 1)
    return bad or (None if res.spans_skipped == 2 else ("lost", f"spans_skipped {res.spans_skipped}, expected 2"))


def _second_export_adds(tmp: Path) -> Verdict:
    otlp(tmp, export(tmp, [span(record(0, "a"))], "first.json"))
    otlp(tmp, export(tmp, [span(record(0, "b"))], "second.json"))
    got = stored(tmp)
    return None if got == [("a", 0), ("b", 0)] else ("lost", f"the second export replaced the first: {got}")


def _rerun_replaces_own(tmp: Path) -> Verdict:
    uri = export(tmp, [span(record(0, "a")), span(record(1, "a"), "t2")])
    otlp(tmp, uri)
    res = otlp(tmp, uri)
    bad = counts(res, 2, 2)
    got = stored(tmp)
    return bad or (None if got == [("a", 0), ("a", 1)] else ("accepted", f"a re-run duplicated rows: {got}"))


def _landing_then_otlp(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a")])
    capture(tmp)
    res = otlp(tmp, export(tmp, [span(record(0, "a")), span(record(1, "a"), "t2")]))
    bad = counts(res, 2, 1) or _needs("duplicate", tmp)
    return bad or (None if stored(tmp) == [("a", 0), ("a", 1)] else ("accepted", f"stored {stored(tmp)}"))


def _otlp_then_landing(tmp: Path) -> Verdict:
    otlp(tmp, export(tmp, [span(record(0, "a"))]))
    write_file(tmp, [line(0, "a"), line(1, "a")])
    res = capture(tmp)
    bad = counts(res, 2, 1)
    return bad or (None if stored(tmp) == [("a", 0), ("a", 1)] else ("accepted", f"stored {stored(tmp)}"))


def _bad_span_alone(tmp: Path) -> Verdict:
    broken = span(record(1, "a"), "t2")
    broken["attributes"].append({"value": {"stringValue": "no key"}})
    res = otlp(tmp, export(tmp, [span(record(0, "a")), broken, span(record(2, "a"), "t3")]))
    return counts(res, 3, 2) or _needs("attribute", tmp)


def _span_not_object(tmp: Path) -> Verdict:
    res = otlp(tmp, export(tmp, [span(record(0, "a")), "a span as text", 42]))
    return counts(res, 3, 1) or _needs("expected an object", tmp)


def _truncated_document(tmp: Path) -> Verdict:
    path = tmp / "cut.json"
    path.write_text(json.dumps(doc([span(record(i, "a"), f"t{i}") for i in range(5)]))[:-400])
    res = otlp(tmp, f"file://{path}")
    if res.rows_in != res.rows_accepted + res.rows_quarantined or res.rows_quarantined != 1:
        return "lost", f"{res.rows_in} in, {res.rows_accepted} accepted, {res.rows_quarantined} quarantined"
    return None if res.rows_accepted >= 3 else ("lost", f"spans before the break dropped: {res.rows_accepted}")


def _broken_line_resyncs(tmp: Path) -> Verdict:
    uri = export(tmp, [span(record(i, "a"), f"t{i}") for i in range(4)], lines=True)
    path = Path(uri[len("file://") :])
    rows = path.read_text().splitlines()
    rows.insert(2, '{"resourceSpans": [{"scopeSpans": [{"spans": [ {"traceId": ')
    path.write_text("\n".join(rows) + "\n")
    res = otlp(tmp, uri)
    return counts(res, 5, 4) or _needs("not valid OTLP/JSON", tmp)


def _not_json(tmp: Path) -> Verdict:
    path = tmp / "x.json"
    path.write_text("this is not an export at all\n")
    res = otlp(tmp, f"file://{path}")
    return counts(res, 1, 0) or _needs("otlp", tmp)


def _document_list(tmp: Path) -> Verdict:
    path = tmp / "x.json"
    path.write_text("[1, 2, 3]")
    res = otlp(tmp, f"file://{path}")
    return counts(res, 1, 0) or _needs("expected an object", tmp)


DEEP = "[" * 100_000 + "]" * 100_000


def _deep_record(tmp: Path) -> Verdict:
    """A ``rlops.record`` string nested 100,000 levels deep is one quarantined span, not a failed run."""
    deep = {**span(None, "t2"), "attributes": [{"key": "rlops.record", "value": {"stringValue": DEEP}}]}
    res = otlp(tmp, export(tmp, [span(record(0, "a")), deep, span(record(1, "a"), "t3")]))
    return counts(res, 3, 2) or _needs("depth", tmp)


def _deep_decision(tmp: Path) -> Verdict:
    """The same through a framework's ``rlops.decision`` attribute."""
    deep = {**span(None, "t2"), "attributes": [{"key": "rlops.decision", "value": {"stringValue": DEEP}}]}
    res = otlp(tmp, export(tmp, [span(record(0, "a")), deep]))
    return counts(res, 2, 1) or _needs("depth", tmp)


def _deep_attribute_value(tmp: Path) -> Verdict:
    """A span whose JSON itself nests 100,000 levels (an attribute value of nested lists) is skipped
    as one quarantined span; the spans after it in the document still land."""
    path = tmp / "deep.json"
    good, after = json.dumps(span(record(0, "a"))), json.dumps(span(record(1, "a"), "t3"))
    deep = '{"traceId": "t2", "spanId": "s2", "name": "decision", "attributes": [{"key": "rlops.record", '
    deep += '"value": {"arrayValue": ' + '{"values": [' * 50_000 + "]}" * 50_000 + "}}]}"
    path.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [' + ",".join([good, deep, after]) + "]}]}]}")
    res = otlp(tmp, f"file://{path}")
    return counts(res, 3, 2) or _needs("depth", tmp)


def _span_lists_not_arrays(tmp: Path) -> Verdict:
    """``{"resourceSpans": "abc"}`` is no OTLP export: quarantined naming the key, never an empty hour."""
    path = tmp / "x.json"
    path.write_text('{"resourceSpans": "abc"}')
    res = otlp(tmp, f"file://{path}")
    return counts(res, 1, 0) or _needs("resourceSpans", tmp)


def _no_span_list(tmp: Path) -> Verdict:
    """A JSON object without ``resourceSpans`` (another signal's export, a config file) is refused
    the same way; an export of no spans (``{"resourceSpans": []}``) is an empty hour."""
    path = tmp / "x.json"
    path.write_text('{"resourceLogs": []}\n{"resourceSpans": []}\n')
    res = otlp(tmp, f"file://{path}")
    return counts(res, 1, 0) or _needs("resourceSpans", tmp)


def _spans_not_array(tmp: Path) -> Verdict:
    path = tmp / "x.json"
    good = json.dumps(doc([span(record(0, "a"))]))
    path.write_text(good + '\n{"resourceSpans": [{"scopeSpans": [{"spans": {"traceId": "t"}}]}]}\n')
    res = otlp(tmp, f"file://{path}")
    return counts(res, 2, 1) or _needs("spans", tmp)


def _empty_file(tmp: Path) -> Verdict:
    path = tmp / "x.json"
    path.write_text("")
    return counts(otlp(tmp, f"file://{path}"), 0, 0)


def _missing_file(tmp: Path) -> Verdict:
    return expect_error(lambda: otlp(tmp, f"file://{tmp}/nope.json"), 1, ["nope.json"])


def _record_not_object(tmp: Path) -> Verdict:
    res = otlp(
        tmp,
        export(
            tmp,
            [
                span(record(0, "a")),
                {**span(None, "t2"), "attributes": [{"key": "rlops.record", "value": {"stringValue": "[1, 2]"}}]},
            ],
        ),
    )
    return counts(res, 2, 1)


def _pretty_printed(tmp: Path) -> Verdict:
    path = tmp / "pretty.json"
    path.write_text(json.dumps(doc([span(record(i, "a"), f"t{i}") for i in range(3)]), indent=2))
    return counts(otlp(tmp, f"file://{path}"), 3, 3)


def _gzip_export(tmp: Path) -> Verdict:
    import gzip

    path = tmp / "spans.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc([span(record(0, "a"))])).encode()))
    return counts(otlp(tmp, f"file://{path}"), 1, 1)


def _manifest_per_source(tmp: Path) -> Verdict:
    otlp(tmp, export(tmp, [span(record(0, "a"))], "first.json"))
    otlp(tmp, export(tmp, [span(record(0, "b"))], "second.json"))
    found = sorted(p.name for p in (tmp / "traces" / "_manifests").rglob("*.json"))
    complete = [json.loads(p.read_text())["status"] for p in (tmp / "traces" / "_manifests").rglob("*.json")]
    if len(found) != 2 or set(complete) != {"complete"}:
        return "lost", f"manifests {found} {complete}"
    return None


def _streamed_memory(tmp: Path) -> Verdict:
    """3·10^4 tiny spans in one document: the reader holds one span at a time, not the document."""
    import tracemalloc

    from rlops.pipeline_steps.capture.trace_sources import otlp_source
    from rlops.storage.backend import Storage

    path = tmp / "big.json"
    one = json.dumps(span(record(0, "a")))
    with path.open("w") as fh:
        fh.write('{"resourceSpans": [{"scopeSpans": [{"spans": [')
        fh.write(",".join([one] * 30_000))
        fh.write("]}]}]}")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        n = sum(1 for _ in otlp_source(Storage(f"file://{tmp}"), f"file://{path}").items)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if n != 30_000:
        return "lost", f"{n} rows from 30000 spans"
    # reading the document whole takes more than its size; one span at a time takes a fixed buffer
    return None if peak < size / 2 else ("lost", f"peak {peak / 1e6:.0f} MB for a {size / 1e6:.0f} MB export")


def _chunks_bounded(tmp: Path) -> Verdict:
    res = otlp(tmp, export(tmp, [span(record(i, f"e{i}"), f"t{i}") for i in range(25)]), chunk_rows=4)
    return counts(res, 25, 25)


def _mlflow_missing_experiment(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.capture.trace_sources import mlflow_source

    client = mock.MagicMock()
    client.get_experiment_by_name.return_value = None
    client.search_experiments.return_value = [mock.Mock(name="credit_approval")]
    with mock.patch("mlflow.MlflowClient", return_value=client):
        return expect_error(
            lambda: mlflow_source("sqlite:///x.db", "credit_aproval", START, END),
            2,
            ["credit_aproval", "capture.mlflow_experiment"],
        )


def _mlflow_nested_decision(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.capture.core import write_capture
    from rlops.pipeline_steps.capture.trace_sources import mlflow_source
    from rlops.storage.backend import Storage

    def s(name: str, parent: str | None, attrs: dict[str, Any]) -> Any:
        return type("Span", (), {"name": name, "parent_id": parent, "attributes": attrs})()

    traces = [
        type(
            "T",
            (),
            {
                "info": type("I", (), {"trace_id": f"tr-{i}"})(),
                "data": type(
                    "D",
                    (),
                    {
                        "spans": [
                            s("request", None, {}),
                            s("decision", "root", {"rlops.record": json.dumps(record(i, "m"))}),
                            s("observe", "d", {}),
                        ]
                    },
                )(),
            },
        )()
        for i in range(3)
    ]
    page = mock.MagicMock()
    page.__iter__.return_value = iter(traces)
    page.token = None
    client = mock.MagicMock()
    client.search_traces.return_value = page
    with mock.patch("mlflow.MlflowClient", return_value=client):
        storage = Storage(f"file://{tmp}")
        res = write_capture(
            storage,
            mlflow_source("sqlite:///x.db", SCENARIO, START, END),
            f"file://{tmp / 'traces'}",
            SCENARIO,
            contract(),
            START,
            END,
        )
    bad = counts(res, 3, 3)
    return bad or (None if res.spans_skipped == 6 else ("lost", f"spans_skipped {res.spans_skipped}"))


PROBES = [
    IOProbe(f"otlp_{fn.__name__.strip('_')}", fn)
    for fn in (
        _duplicate,
        _outside_interval,
        _nested_decision,
        _second_export_adds,
        _rerun_replaces_own,
        _landing_then_otlp,
        _otlp_then_landing,
        _bad_span_alone,
        _span_not_object,
        _truncated_document,
        _broken_line_resyncs,
        _not_json,
        _document_list,
        _deep_record,
        _deep_decision,
        _deep_attribute_value,
        _span_lists_not_arrays,
        _no_span_list,
        _spans_not_array,
        _empty_file,
        _missing_file,
        _record_not_object,
        _pretty_printed,
        _gzip_export,
        _manifest_per_source,
        _streamed_memory,
        _chunks_bounded,
    )
]


def _cli_from_mlflow_unknown_experiment(tmp: Path) -> Verdict:
    """Through the command line against a real (fresh) tracking store: exit 2 naming the experiment."""
    from .io_harness import expect_cli_error

    return expect_cli_error(
        ["capture", "--from-mlflow", "--run-key", "20260105T1000", "--scenario", "credit_approval"],
        2,
        ("credit_approval", "capture.mlflow_experiment"),
    )


def _cli_otlp_file(tmp: Path) -> Verdict:
    """``rlops capture --otlp-file`` end to end: one decision nested in a request span, one duplicate.
    The kit's record is of a smaller scenario than credit_approval, so both rows are quarantined:
    more than ``capture.max_quarantine_share``, exit 2 naming it, the counts printed all the same."""
    from .io_harness import cli

    rec = {**record(0, "cli"), "scenario": "credit_approval"}
    uri = export(
        tmp,
        [span(None, "t1", "root", name="POST /decide"), span(rec, "t1", "d1", parent="root"), span(rec, "t2", "d2")],
    )
    rc, out, err = cli(
        ["capture", "--otlp-file", uri, "--run-key", "20260105T1000", "--scenario", "credit_approval", "--json"]
    )
    if rc != 2 or "capture.max_quarantine_share" not in err:
        return ("traceback" if "internal error" in err else "accepted"), f"exit {rc}: {err.strip()[-300:]}"
    got = json.loads(out)
    if got["rows_quarantined"] != 2:
        return "accepted", f"{got['rows_quarantined']} of 2 rows quarantined, expected both"
    if got["rows_in"] != got["rows_accepted"] + got["rows_quarantined"] or got["rows_in"] != 2:
        return "lost", f"{got['rows_in']} in, {got['rows_accepted']} accepted, {got['rows_quarantined']} quarantined"
    return None if got["spans_skipped"] == 1 else ("lost", f"spans_skipped {got['spans_skipped']}")


PROBES += [
    IOProbe("cli_from_mlflow_unknown_experiment", _cli_from_mlflow_unknown_experiment, 90),
    IOProbe("cli_otlp_file_end_to_end", _cli_otlp_file, 90),
    IOProbe("mlflow_missing_experiment_is_an_error", _mlflow_missing_experiment),
    IOProbe("mlflow_nested_decision_counted", _mlflow_nested_decision),
]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_trace_source_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

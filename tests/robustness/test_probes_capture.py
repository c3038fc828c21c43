"""Capture probes: one bad landing line next to a good one, and bad landing files. Each line is
quarantined with a reason naming what is wrong (never a crash, never the whole interval lost);
rows in = accepted + quarantined; a broken file fails the run with one clear error and a manifest
that says ``failed``. One test per probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .capture_kit import capture, check_counts, line, manifest, reasons, record, write_file
from .io_harness import IOProbe, Verdict, check, expect_error, ids, run_probe

GOOD = line(0, "ep-good")


def bad_line(id: str, text: str | bytes, reason: str) -> IOProbe:
    """``text`` next to a good line: one accepted, ``text`` quarantined with ``reason`` in its reason."""

    def run(tmp: Path) -> Verdict:
        write_file(tmp, [GOOD, text])
        res = capture(tmp)
        bad = check_counts(res, 2, 1)
        if bad:
            return bad
        got = reasons(tmp)
        if not any(reason in r for r in got):
            return "accepted", f"no quarantine reason mentions {reason!r}: {got}"
        return None if manifest(tmp).get("status") == "complete" else ("lost", f"manifest {manifest(tmp)}")

    return IOProbe(f"line_{id}", run)


def good_line(id: str, text: str, check: str | None = None) -> IOProbe:
    """An odd but valid line: accepted (``check`` must appear in the stored ``extra``)."""

    def run(tmp: Path) -> Verdict:
        write_file(tmp, [GOOD, text])
        res = capture(tmp)
        bad = check_counts(res, 2, 2)
        if bad:
            return bad[0], f"{bad[1]}; reasons {reasons(tmp)}"
        if check:
            from rlops.storage.backend import Storage

            extra = Storage(f"file://{tmp}").read_parquet(f"file://{tmp / 'traces'}")["extra"].dropna().tolist()
            if not any(check in e for e in extra):
                return "lost", f"{check!r} is not kept in extra: {extra}"
        return None

    return IOProbe(f"valid_{id}", run)


def rec(**over: object) -> str:
    base = record(1, "ep-bad")
    base.update(over)
    return json.dumps(base)


def state(**fields: object) -> dict[str, object]:
    return {
        "user_profile": {"credit_score": fields.get("score", 640)},
        "application": {"channel": fields.get("channel", "web")},
    }


LINE_PROBES = [
    bad_line("deep_array_100k", "[" * 100_000 + "]" * 100_000, "depth"),
    bad_line("deep_object_100k", '{"a":' * 100_000 + "1" + "}" * 100_000, "depth"),
    bad_line(
        "deep_state_200",
        json.dumps({**record(1, "ep-bad"), "extra": {"x": json.loads("[" * 200 + "]" * 200)}}),
        "depth",
    ),
    bad_line("deep_unclosed_100k", "[" * 100_000, "depth"),
    bad_line("oversize_2mb", json.dumps({**record(1, "ep-bad"), "blob": "x" * (2 << 20)}), "size"),
    bad_line("not_utf8", b'{"trace_id": "\xff\xfe"}', "encoding"),
    bad_line("latin1_text", '{"x": "caf\xe9"}'.encode("latin-1"), "encoding"),
    bad_line("not_json", "this is not json", "json"),
    bad_line("truncated_json", rec()[:40], "json"),
    bad_line("json_array", "[1, 2, 3]", "json"),
    bad_line("json_string", '"a string"', "json"),
    bad_line("json_number", "42", "json"),
    bad_line("json_null", "null", "json"),
    bad_line("json_true", "true", "json"),
    bad_line("nan_literal", rec(logp=float("nan")), "NaN"),
    bad_line("infinity_literal", rec(value=float("inf")), "value"),
    bad_line("ts_year_57972", rec(ts="57972-04-20T00:00:00Z"), "ts"),
    bad_line("ts_1970", rec(ts="1970-01-01T00:00:00Z"), "interval"),
    bad_line("ts_next_day", rec(ts="2026-01-06T10:30:00Z"), "interval"),
    bad_line("ts_epoch_huge", rec(ts=1e20), "ts"),
    bad_line("ts_garbage", rec(ts="yesterday"), "ts"),
    bad_line("ts_list", rec(ts=[1, 2]), "ts"),
    bad_line("ts_object", rec(ts={"at": "2026-01-05T10:00:00Z"}), "ts"),
    bad_line("duplicate_episode_step", line(0, "ep-good", trace_id="other"), "duplicate"),
    bad_line("reserved_key_extra_not_object", rec(_secret=1, extra="text"), "_secret"),
    bad_line("step_negative", rec(step=-1), "step"),
    bad_line("step_text", rec(step="1"), "step"),
    bad_line("step_fraction", rec(step=1.5), "step"),
    bad_line("step_beyond_64_bits", rec(step=2**70), "step"),
    bad_line("step_bool", rec(step=True), "step"),
    bad_line("action_unknown", rec(action="launch_rocket"), "action"),
    bad_line("mask_wrong_length", rec(action_mask="11"), "action_mask"),
    bad_line("mask_no_legal_action", rec(action_mask="0000"), "action_mask"),
    bad_line(
        "trace_id_missing", json.dumps({k: v for k, v in record(1, "ep-bad").items() if k != "trace_id"}), "trace_id"
    ),
    bad_line("episode_id_empty", rec(episode_id=""), "episode_id"),
    bad_line("scenario_other", rec(scenario="other_scenario"), "scenario"),
    bad_line("source_unknown", rec(source="mars"), "source"),
    bad_line("done_text", rec(done="yes"), "done"),
    bad_line("logp_positive", rec(logp=3.0), "logp"),
    bad_line("latency_negative", rec(latency_ms=-5), "latency_ms"),
    bad_line("state_enum_unknown", rec(state=state(channel="carrier_pigeon")), "application.channel"),
    bad_line("state_out_of_range", rec(state=state(score=99999)), "credit_score"),
    bad_line("state_wrong_type", rec(state=state(score="high")), "credit_score"),
    bad_line("lone_surrogate", rec(trace_id="\ud800"), "encoding"),
    bad_line("lone_surrogate_in_key", json.dumps({**record(1, "ep-bad"), "\udc00k": 1}), "encoding"),
]

VALID_PROBES = [
    good_line("reserved_key_kept", rec(_raw="mine", _source="also mine"), "_raw"),
    good_line("reserved_key_merged_into_extra", rec(_note="x", extra={"k": 1}), "_note"),
    good_line("many_unknown_keys", json.dumps({**record(1, "ep-bad"), **{f"k{i}": i for i in range(2000)}}), "k1999"),
    good_line("ts_buffered_30min_early", rec(ts="2026-01-05T09:30:00Z")),
    good_line("ts_offset_zone", rec(ts="2026-01-05T12:30:00+02:00")),
    good_line("unicode_text", rec(trace_id="請求-✓-😀")),
    good_line("crlf_line", rec() + "\r"),
    good_line("nul_in_id_kept", rec(episode_id="ep\x00odd")),
    good_line("surrogate_pair_escaped", rec(trace_id="\U0001f600")),
    good_line(
        "depth_just_allowed",
        json.dumps({**record(1, "ep-bad"), "extra": {"x": json.loads("[" * 60 + "]" * 60)}}),
        "[[[[",
    ),
]


# --------------------------------------------------------------------------- files


def file_probe(id: str, run) -> IOProbe:  # type: ignore[no-untyped-def]
    return IOProbe(f"file_{id}", run)


def _gz_read(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a"), line(1, "a")], gz=True, name="20260105T100500000000Z-agent-1-000000.jsonl.gz")
    return check_counts(capture(tmp), 2, 2)


def _upper_read(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a")], name="20260105T100500000000Z-agent-1-000000.JSONL")
    write_file(tmp, [line(1, "a")], gz=True, name="20260105T100600000000Z-agent-1-000001.Jsonl.GZ")
    return check_counts(capture(tmp), 2, 2)


def _other_reported(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a")])
    write_file(tmp, [line(1, "a")], name="20260105T100700000000Z-agent-1-000002.json")
    res = capture(tmp)
    if not any(u.endswith(".json") for u in res.files_skipped):
        return "lost", f"the .json landing file was skipped without a word: {res.files_skipped}"
    return None if "files_skipped" in manifest(tmp) else ("lost", "the manifest does not list skipped files")


def _corrupt_gz(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a")])
    path = write_file(tmp, [line(1, "a")], name="20260105T100700000000Z-agent-1-000002.jsonl.gz")
    path.write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate")
    verdict = expect_error(lambda: capture(tmp), 1, [".jsonl.gz"])
    if verdict:
        return verdict
    return None if manifest(tmp).get("status") == "failed" else ("lost", f"manifest {manifest(tmp).get('status')}")


def _truncated_gz(tmp: Path) -> Verdict:
    path = write_file(
        tmp, [line(i, "a") for i in range(200)], gz=True, name="20260105T100700000000Z-agent-1-000002.jsonl.gz"
    )
    path.write_bytes(path.read_bytes()[:-30])
    verdict = expect_error(lambda: capture(tmp), 1, ["000002.jsonl.gz"])
    return verdict or (None if manifest(tmp).get("status") == "failed" else ("lost", "manifest not failed"))


def _rerun_after_failure(tmp: Path) -> Verdict:
    path = write_file(tmp, [line(0, "a")], gz=True, name="20260105T100700000000Z-agent-1-000002.jsonl.gz")
    good = path.read_bytes()
    path.write_bytes(b"not gzip at all")
    try:
        capture(tmp)
    except Exception:  # noqa: BLE001 - the failed run is the setup
        pass
    path.write_bytes(good)
    bad = check_counts(capture(tmp), 1, 1)
    return bad or (None if manifest(tmp).get("status") == "complete" else ("lost", "manifest not complete"))


def _deep_line_does_not_stop_interval(tmp: Path) -> Verdict:
    lines = [line(i, "a") for i in range(50)]
    lines.insert(25, "[" * 100_000 + "]" * 100_000)
    write_file(tmp, lines)
    bad = check_counts(capture(tmp), 51, 50)
    return bad or check_counts(capture(tmp), 51, 50)  # and again on a re-run


def _empty_and_blank(tmp: Path) -> Verdict:
    write_file(tmp, [], name="20260105T100500000000Z-agent-1-000000.jsonl")
    write_file(tmp, ["", "   ", "\t"], name="20260105T100600000000Z-agent-1-000001.jsonl")
    res = capture(tmp)
    return None if (res.rows_in, res.rows_accepted) == (0, 0) and len(res.files_read) == 2 else ("lost", f"{res}")


def _dup_across_files(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a")], name="20260105T100500000000Z-agent-1-000000.jsonl")
    write_file(tmp, [line(0, "a")], name="20260105T100600000000Z-agent-2-000000.jsonl")
    bad = check_counts(capture(tmp), 2, 1)
    return bad or (None if any("duplicate" in r for r in reasons(tmp)) else ("accepted", "no duplicate reason"))


def _dup_across_chunks(tmp: Path) -> Verdict:
    write_file(tmp, [line(i % 3, "a") for i in range(9)])
    bad = check_counts(capture(tmp, chunk_rows=2), 9, 3)
    return bad or (None if sum("duplicate" in r for r in reasons(tmp)) == 6 else ("accepted", str(reasons(tmp))))


def _bogus_year_not_a_folder(tmp: Path) -> Verdict:
    write_file(tmp, [line(0, "a", ts="57972-04-20T00:00:00Z"), line(1, "a", ts="2300-01-01T00:00:00Z")])
    capture(tmp)
    folders = sorted({p.name for p in tmp.rglob("date=*")})
    return None if folders == ["date=2026-01-05"] else ("accepted", f"partition folders {folders}")


FILE_PROBES = [
    file_probe("jsonl_gz_read", _gz_read),
    file_probe("upper_case_suffix_read", _upper_read),
    file_probe("other_suffix_reported", _other_reported),
    file_probe("corrupt_gzip_fails_clearly", _corrupt_gz),
    file_probe("truncated_gzip_fails_clearly", _truncated_gz),
    file_probe("rerun_after_failed_run", _rerun_after_failure),
    file_probe("deep_line_does_not_stop_interval", _deep_line_does_not_stop_interval),
    file_probe("empty_and_blank_files", _empty_and_blank),
    file_probe("duplicate_across_files", _dup_across_files),
    file_probe("duplicate_across_chunks", _dup_across_chunks),
    file_probe("bogus_year_names_no_folder", _bogus_year_not_a_folder),
]

PROBES = [*LINE_PROBES, *VALID_PROBES, *FILE_PROBES]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_capture_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))


# --------------------------------------------------------------------------- generated lines

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=30,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=200),
            st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
            JSON.map(json.dumps),
            st.dictionaries(st.sampled_from(list(record())) | st.text(max_size=6), JSON, max_size=12).map(json.dumps),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_generated_lines_never_crash_and_lose_nothing(lines: list[str]) -> None:
    """Any list of lines: parse_json_lines returns one row or one reason per line, never raises."""
    from rlops.data_contracts.records import parse_json_lines

    lines = [ln for ln in lines if ln.strip()] or ["{}"]
    rows, unparseable = parse_json_lines(lines)
    assert len(rows) + len(unparseable) == len(lines)
    assert unparseable["quarantine_reason"].str.len().gt(0).all()


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            JSON.map(json.dumps),
            st.builds(
                lambda over: json.dumps({**record(0, "g"), **over}),
                st.dictionaries(st.sampled_from(list(record())), JSON, max_size=3),
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_generated_landing_files_are_captured_whole(tmp_path_factory: pytest.TempPathFactory, lines: list[str]) -> None:
    """Whole capture runs on generated files: no exception, rows in = lines = accepted + quarantined."""
    tmp = tmp_path_factory.mktemp("gen")
    write_file(tmp, lines)
    res = capture(tmp)
    assert res.rows_in == len([ln for ln in lines if ln.strip()]) == res.rows_accepted + res.rows_quarantined
    assert manifest(tmp)["status"] == "complete"

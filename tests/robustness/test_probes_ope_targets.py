"""``rlops model evaluate --target`` probes: the target is a word, a policy reference or a file a
person or a script wrote, estimated on a window of logged traffic. A file that is empty, not a table,
not a regular file (a folder, a FIFO, a device), a path too long, probabilities that are NaN, negative,
text, infinite, overflowing their sum, not summing to 1 or on a masked action, a trace id twice or
missing, rows of the window it does not cover; a version that does not exist, an alias not set, a
window out of bounds — each ends in exit 2 with one line naming the problem, never a traceback, a
hang or an estimate. The control: the logging policy's own probabilities give DR = the logged
return, exit 0. One test per probe."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.ope_target_kit import RUN_KEY, SCENARIO, logged_rows, logging_probabilities, write_table, write_window

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, ids, run_probe

ARGV = ["model", "evaluate", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--direct-method", "none"]


def _window(rows: pd.DataFrame | None = None) -> None:
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    write_window(ctx.storage, ctx.uri, logged_rows() if rows is None else rows)


def refused(id: str, target: Callable[[Path], str], mentions: tuple[str, ...], extra: tuple[str, ...] = ()) -> IOProbe:
    """``--target target(tmp)`` on the logged window: exit 2, one line naming ``mentions``."""

    def run(tmp: Path) -> Verdict:
        _window()
        return expect_cli_error([*ARGV, "--target", target(tmp), *extra], 2, mentions)

    return IOProbe(f"target_{id}", run)


def table(name: str, spoil: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], str]:
    """The logger's probabilities, spoiled, written to ``tmp/name``."""
    return lambda tmp: str(write_table(spoil(logging_probabilities(logged_rows())), tmp / name))


def raw(name: str, content: bytes) -> Callable[[Path], str]:
    def write(tmp: Path) -> str:
        (tmp / name).write_bytes(content)
        return str(tmp / name)

    return write


def first(column: str, value: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def spoil(t: pd.DataFrame) -> pd.DataFrame:
        t = t.astype({column: object})
        t.loc[t.index[0], column] = value
        return t

    return spoil


def on_a_masked_action(t: pd.DataFrame) -> pd.DataFrame:
    masks = logged_rows()["action_mask"].astype(str)
    i = next(k for k, m in enumerate(masks) if "0" in m)
    halves = (masks.iloc[i].index("0"), masks.iloc[i].index("1"))
    t.loc[t.index[i], t.columns[1:]] = [0.5 if k in halves else 0.0 for k in range(len(t.columns) - 1)]
    return t


def fifo(tmp: Path) -> str:
    path = tmp / "pipe.csv"
    if not path.exists():
        os.mkfifo(path)
    return str(path)


def folder(tmp: Path) -> str:
    (tmp / "probabilities.csv").mkdir(exist_ok=True)
    return str(tmp / "probabilities.csv")


def under_a_file(tmp: Path) -> str:
    (tmp / "file.csv").write_text("trace_id\n")
    return str(tmp / "file.csv" / "inner.csv")


def per_episode_ids(tmp: Path) -> Verdict:
    """Trace ids one per episode (as the agent SDK writes them) and a file without a step column."""
    rows = logged_rows()
    probs = logging_probabilities(rows)
    rows["trace_id"] = rows["episode_id"]
    _window(rows)
    probs["trace_id"] = rows["episode_id"].to_numpy()
    path = write_table(probs.drop_duplicates("trace_id"), tmp / "per-episode.parquet")
    return expect_cli_error([*ARGV, "--target", str(path)], 2, ("add a step column",))


def control(tmp: Path) -> Verdict:
    """Clean: the logging policy's own probabilities read the logged return, exit 0."""
    _window()
    path = write_table(logging_probabilities(logged_rows()), tmp / "logger.parquet")
    rc, out, err = cli([*ARGV, "--target", str(path), "--json"])
    if rc != 0:
        return "accepted", f"the logger's own file exited {rc}: {err.strip()[-300:]}"
    doc = json.loads(out)
    dr, logged = doc["estimates"]["dr"]["value"], doc["logged_return"]
    return None if np.isclose(dr, logged, rtol=1e-5) else ("accepted", f"DR {dr} is not the logged return {logged}")


CSV = "logger.csv"
PROBES = [
    IOProbe("target_control", control),
    # ---- files that are no table of probabilities
    refused("empty-csv", raw("empty.csv", b""), ("not a readable csv file",)),
    refused("empty-parquet", raw("empty.parquet", b""), ("not a readable parquet file",)),
    refused("garbage-parquet", raw("junk.parquet", os.urandom(512)), ("not a readable parquet file",)),
    refused("not-json-lines", raw("junk.jsonl", b"{not json\n"), ("not a readable JSON lines file",)),
    refused("non-utf8-csv", raw("latin.csv", "trace_id,é\n1,\xff\n".encode("latin-1")), ("not a readable csv",)),
    refused("header-only", table(CSV, lambda t: t.iloc[:0]), ("no probabilities for", "first: trace_id")),
    refused("wrong-suffix", raw("probabilities.txt", b"trace_id\n"), ("expected a .parquet",)),
    refused("a-folder", folder, ("a folder",)),
    refused("a-fifo", fifo, ("not a regular file",)),
    refused("dev-null", lambda tmp: "/dev/null", ("not a regular file",)),
    refused("path-5000-chars", lambda tmp: "p" * 5000 + ".csv", ("cannot read it", "File name too long")),
    refused("path-5000-chars-no-suffix", lambda tmp: "/" + "p" * 5000, ("expected rules, uniform",)),
    refused("path-under-a-file", under_a_file, ("cannot read it",)),
    refused("nul-byte", lambda tmp: str(tmp / "a\0b.csv"), ("cannot read it",)),
    refused("missing-file", lambda tmp: str(tmp / "nowhere.parquet"), ("no such file",)),
    # ---- probabilities that are no probabilities
    refused("nan", table(CSV, first("reject", np.nan)), ("reject", "not a finite number")),
    refused("infinite", table(CSV, first("reject", np.inf)), ("reject", "inf, not a finite number")),
    refused("negative", table(CSV, first("reject", -0.25)), ("reject", "below 0")),
    refused("text", table(CSV, first("reject", "high")), ("reject", "'high'")),
    refused("sum-overflows", table(CSV, lambda t: t.assign(reject=1e308, approve=1e308)), ("sum to inf",)),
    refused("sum-half", table("half.parquet", lambda t: t.assign(**{c: t[c] / 2 for c in t.columns[1:]})), ("sum to",)),
    refused("masked-action", table("masked.parquet", on_a_masked_action), ("which is masked",)),
    # ---- keys and columns
    refused("duplicated-trace-id", table(CSV, lambda t: pd.concat([t, t.iloc[[3]]])), ("appears twice",)),
    refused("blank-trace-id", table(CSV, first("trace_id", " ")), ("has no trace_id",)),
    refused("no-trace-id", table(CSV, lambda t: t.drop(columns="trace_id")), ("no trace_id column",)),
    refused("step-text", table(CSV, lambda t: t.assign(step="first")), ("not a step index",)),
    refused("unknown-column", table(CSV, lambda t: t.assign(APPROVE=0.0)), ("'APPROVE' is neither",)),
    refused("missing-action", table(CSV, lambda t: t.drop(columns="reject")), ("no column for action reject",)),
    refused("rows-missing", table(CSV, lambda t: t.sample(frac=0.5, random_state=0)), ("no probabilities for",)),
    IOProbe("target_trace-ids-per-episode", per_episode_ids),
    # ---- words, versions, settings
    refused("empty", lambda tmp: "", ("--target '': empty",)),
    refused("unknown-word", lambda tmp: "greedy-ish", ("expected rules, uniform",)),
    refused("unknown-version", lambda tmp: "42", ("has no version 42",)),
    refused("alias-not-set", lambda tmp: "champion", ("alias champion is not set",)),
    refused("other-scenario", lambda tmp: "other-policy/3", ("belongs to scenario 'other'",)),
    refused("window-nan", lambda tmp: "uniform", ("--window-hours nan",), ("--window-hours", "nan")),
    refused("window-1e300", lambda tmp: "uniform", ("--window-hours 1e+300",), ("--window-hours", "1e300")),
    refused("window-zero", lambda tmp: "uniform", ("--window-hours 0",), ("--window-hours", "0")),
    refused("episodes-with-target", lambda tmp: "uniform", ("--episodes goes with --candidate",), ("--episodes", "5")),
]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_target_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

"""SQL probes: every user-controlled string that reaches a DuckDB query of the trace store — a trace
id, an episode id, a policy version, a column (component or field) name, the path of the store —
carrying quotes, ``;``, ``--``, NUL, 10,000 characters. The values are bound as parameters and the
identifiers quoted or checked against the store's columns, so each string is matched literally:
a stored row carrying it is found exactly, a string no row carries finds nothing (never every row,
never a SQL error), and ``rlops replay`` answers with one line. One test per probe."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from .io_harness import IOProbe, Verdict, check, cli, run_probe

#: Strings an attacker or a careless agent can put in an id, a version, a name.
HOSTILE: dict[str, str] = {
    "single-quote": "x' OR '1'='1",
    "double-quote": 'x" OR "1"="1',
    "semicolon-drop": "x'; DROP TABLE traces; --",
    "line-comment": "x -- everything after is a comment",
    "block-comment": "x /* */ OR 1=1",
    "nul": "x\x00y",
    "ten-thousand": "a" * 10_000,
    "like-wildcard": "%",
    "star": "*",
    "backslash-quote": "x\\' OR 1=1 --",
    "newline": "x\nOR 1=1",
    "unicode": "трасса-🙂-ﬁ",
    "placeholder": "?",
    "dollar-quote": "$$ OR 1=1 $$",
}


@functools.lru_cache(maxsize=1)
def rows() -> pd.DataFrame:
    """Twelve rule-engine episodes of credit_approval, as the sandbox writes them."""
    from rlops.common.config import REPO_ROOT
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    return rollout_traces(pack, rule_policy, 12, seed=5)


def reader() -> object:
    from rlops.storage.backend import Storage
    from rlops.trace_store.engine import QueryEngineConfig
    from rlops.trace_store.query import TraceReader

    return TraceReader(Storage(root_uri="file:///"), QueryEngineConfig())


def stored(tmp: Path, column: str, value: str, folder: str = "store") -> tuple[str, pd.DataFrame]:
    """The rows with the first episode's ``column`` set to ``value``, as one parquet file; its URI."""
    df = rows().copy()
    first = df["episode_id"] == df["episode_id"].iloc[0]
    if column == "trace_id":
        first = df.index == 0
    df[column] = df[column].astype(object)
    df.loc[first, column] = value
    path = tmp / folder / "part-0.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path, index=False)
    return f"file://{path}", df[first]


def found_exactly(column: str, value: str) -> Callable[[Path], Verdict]:
    """The row(s) stored with ``value`` are read back exactly; ``value`` with one more character
    matches nothing; the count agrees with the read."""

    def run(tmp: Path) -> Verdict:
        uri, expected = stored(tmp, column, value)
        r = reader()
        got = r.read(uri, where={column: value})  # type: ignore[attr-defined]
        if sorted(got["trace_id"]) != sorted(expected["trace_id"]):
            return "accepted", f"where {column} = {value[:30]!r} read {len(got)} rows, expected {len(expected)}"
        if r.count(uri, where={column: value}) != len(expected):  # type: ignore[attr-defined]
            return "accepted", "count() disagrees with read()"
        other = r.read(uri, where={column: value + "x"})  # type: ignore[attr-defined]
        if len(other):
            return "accepted", f"a value no row holds matched {len(other)} rows"
        listed = r.read(uri, where={column: [value, "no-such"]})  # type: ignore[attr-defined]
        return None if len(listed) == len(expected) else ("accepted", f"IN (...) read {len(listed)} rows")

    return run


def episode_of(value: str) -> Callable[[Path], Verdict]:
    """``episode_rows`` of a hostile trace id: that row's whole episode; of an absent one, LookupError."""

    def run(tmp: Path) -> Verdict:
        uri, expected = stored(tmp, "trace_id", value)
        r = reader()
        got = r.episode_rows(uri, value)  # type: ignore[attr-defined]
        want = rows()[rows()["episode_id"] == expected["episode_id"].iloc[0]]
        if len(got) != len(want):
            return "accepted", f"the episode of {value[:30]!r} has {len(got)} rows, expected {len(want)}"
        try:
            r.episode_rows(uri, value + "-absent")  # type: ignore[attr-defined]
        except LookupError:
            return None
        return "accepted", "an absent trace id found an episode"

    return run


def column_name(value: str) -> Callable[[Path], Verdict]:
    """A hostile name asked as a column (``columns``, ``count_by``, a ``where`` key) is no column:
    nothing read, nothing counted, no error."""

    def run(tmp: Path) -> Verdict:
        uri, _ = stored(tmp, "policy_version", "rules")
        r = reader()
        if r.count_by(uri, value) != {}:  # type: ignore[attr-defined]
            return "accepted", "count_by of a column the store lacks counted something"
        if len(r.read(uri, where={value: "x"})):  # type: ignore[attr-defined]
            return "accepted", "a where on a column the store lacks matched rows"
        got = r.read(uri, columns=["trace_id", value])  # type: ignore[attr-defined]
        return None if list(got.columns) == ["trace_id"] else ("accepted", f"columns {list(got.columns)[:5]}")

    return run


def stored_column(value: str) -> Callable[[Path], Verdict]:
    """A column of the file named with a hostile string (a component name, a field written by an
    agent) is read and counted under its own name."""

    def run(tmp: Path) -> Verdict:
        if "\x00" in value:  # parquet refuses a NUL in a column name: nothing can store it
            return None
        df = rows().copy()
        df[value] = "v"
        path = tmp / "store" / "part-0.parquet"
        path.parent.mkdir(parents=True)
        df.to_parquet(path, index=False)
        r = reader()
        uri = f"file://{path}"
        if value not in r.columns(uri):  # type: ignore[attr-defined]
            return "lost", "the column is missing from columns()"
        if r.count_by(uri, value) != {"v": len(df)}:  # type: ignore[attr-defined]
            return "accepted", f"count_by: {str(r.count_by(uri, value))[:100]}"  # type: ignore[attr-defined]
        got = r.read(uri, columns=[value], where={value: "v"})  # type: ignore[attr-defined]
        return None if len(got) == len(df) and list(got.columns) == [value] else ("lost", f"{len(got)} rows")

    return run


def store_path(value: str) -> Callable[[Path], Verdict]:
    """The store under a folder whose name carries the string (a storage root or a scenario folder
    set by an operator) is read like any other."""

    def run(tmp: Path) -> Verdict:
        name = value.replace("/", "_").replace("\x00", "_")[:200]  # a file name: no '/', no NUL, ≤ 255 bytes
        uri, _ = stored(tmp, "policy_version", "rules", folder=name or "empty")
        r = reader()
        n = r.count(uri)  # type: ignore[attr-defined]
        return None if n == len(rows()) else ("lost", f"{n} rows of {len(rows())} read under {name[:30]!r}")

    return run


def replay_cli(value: str) -> Callable[[Path], Verdict]:
    """``rlops replay --trace-id`` of the hostile id: the stored row's episode (exit 0); of an
    absent id, one line naming it (exit 2)."""

    def run(tmp: Path) -> Verdict:
        if "\x00" in value:  # no argument of a process can carry a NUL: argv ends there
            return None
        uri, _ = stored(tmp, "trace_id", value)
        path = uri[len("file://") :]
        argv = ["replay", "--scenario", "credit_approval", "--traces", path, "--json"]
        rc, out, err = cli([*argv, "--trace-id", value])
        if rc != 0 or json.loads(out)["trace_id"] != value:
            return ("traceback" if rc == 1 or "Traceback" in err else "accepted"), f"exit {rc}: {err.strip()[-200:]}"
        rc, out, err = cli([*argv, "--trace-id", value + "-absent"])
        lines = err.strip().splitlines()
        if rc != 2 or len(lines) != 1 or "not found" not in lines[0]:
            return ("traceback" if rc == 1 or "Traceback" in err else "accepted"), f"exit {rc}: {err.strip()[-200:]}"
        return None

    return run


KINDS: dict[str, Callable[[str], Callable[[Path], Verdict]]] = {
    "trace-id": lambda v: found_exactly("trace_id", v),
    "episode-id": lambda v: found_exactly("episode_id", v),
    "policy-version": lambda v: found_exactly("policy_version", v),
    "episode-of-trace": episode_of,
    "column-asked": column_name,
    "column-stored": stored_column,
    "store-path": store_path,
    "replay-cli": replay_cli,
}

PROBES = [IOProbe(f"sql-{kind}-{name}", make(value)) for kind, make in KINDS.items() for name, value in HOSTILE.items()]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_sql_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))

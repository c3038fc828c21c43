"""``rlops import`` probes: a decision log from before rlops and the mapping that names its columns
are whatever another team wrote. A file that is empty, no table, not UTF-8, a folder, a FIFO, a
dangling link, a glob, a name too long; ``--columns`` pairs without a side, twice, or naming no trace
column; a mapping file that is no mapping, has unknown keys, blocks of the wrong shape, constants of
the wrong type, actions or mask positions the pack does not have; a blank policy name; timestamps
that are no times, in the future, year 1, spanning a month — each ends in exit 2 with one error line
naming the file or option and what was expected. Rows that are bad one by one (a propensity outside
(0, 1], a reward of 400 digits) are quarantined with their reason and counted: rows in = accepted +
quarantined, never a silent drop and never a silently wrong value (epoch seconds read as
nanoseconds, a naive time read as UTC without a word). One test per probe."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, ids, run_probe

SCENARIO = "offer_selection"
START = datetime(2026, 1, 5, 9, tzinfo=UTC)
COLUMNS = "episode_id=visit,ts=shown_at,action=item,propensity=pscore,reward_total=click"
ROWS = 20


@functools.lru_cache(maxsize=1)
def _episodes() -> pd.DataFrame:
    from rlops.common.config import REPO_ROOT
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    return rollout_traces(pack, random_policy(3), ROWS, seed=11, profile="live", source="live", start_ts=START)


def foreign() -> pd.DataFrame:
    """A one-step recommender log as another team writes it: its own column names, one row a minute."""
    df = _episodes()
    log = pd.DataFrame(
        {
            "visit": [f"v{i}" for i in range(len(df))],
            "shown_at": [(START + timedelta(minutes=i)).isoformat() for i in range(len(df))],
            "item": df["action"].to_numpy(),
            "pscore": 0.5,
            "click": df["reward_total"].to_numpy(),
        }
    )
    for col in [c for c in df.columns if c.startswith("state.")]:
        log[col.removeprefix("state.")] = df[col].to_numpy()
    return log


Spoil = Callable[[pd.DataFrame], pd.DataFrame]


def spoiled(**values: Any) -> Spoil:
    """Every row's ``column`` set to ``value``."""
    return lambda log: log.assign(**values)


def first(column: str, value: Any) -> Spoil:
    def spoil(log: pd.DataFrame) -> pd.DataFrame:
        log = log.astype({column: object})
        log.loc[0, column] = value
        return log

    return spoil


def log_file(name: str = "log.csv", spoil: Spoil | None = None) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        log = foreign() if spoil is None else spoil(foreign())
        path = tmp / name
        if name.endswith(".parquet"):
            log.to_parquet(path)
        elif name.endswith(".jsonl"):
            log.to_json(path, orient="records", lines=True)
        else:
            log.to_csv(path, index=False)
        return path

    return write


def raw(name: str, content: bytes | str) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        path = tmp / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    return write


def argv(path: str, columns: str | None = COLUMNS, policy: str | None = "recsys", *extra: str) -> list[str]:
    out = ["import", "--scenario", SCENARIO, "--path", path]
    out += ["--columns", columns] if columns is not None else []
    out += ["--policy-version", policy] if policy is not None else []
    return [*out, *extra]


def refused(
    id: str,
    make: Callable[[Path], Path | str],
    mentions: tuple[str, ...],
    columns: str | None = COLUMNS,
    policy: str | None = "recsys",
    mapping: str | None = None,
    extra: tuple[str, ...] = (),
) -> IOProbe:
    """Exit 2 before any row is written: one line naming ``mentions``."""

    def run(tmp: Path) -> Verdict:
        path = str(make(tmp))
        more = ("--mapping", _mapping(tmp, mapping)) if mapping is not None else ()
        verdict = expect_cli_error(argv(path, columns, policy, *more, *extra), 2, mentions)
        return verdict or _nothing_written(tmp)

    return IOProbe(f"import_{id}", run)


def _mapping(tmp: Path, text: str) -> str:
    path = tmp / "mapping.yaml"
    if not path.exists():
        path.write_text(text)
    return str(path)


def _nothing_written(tmp: Path) -> Verdict:
    stored = list((tmp.parent.parent / "store").glob("traces/**/*.parquet"))
    return ("lost", f"a refused import wrote {stored[0]}") if stored else None


def _summary(out: str) -> tuple[int, int, int] | None:
    """(rows in, accepted, quarantined) of the command's summary line."""
    import re

    m = re.search(r"(\d+) rows in, (\d+) accepted, (\d+) quarantined", out)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


def quarantined(id: str, spoil: Spoil, bad: int, mentions: tuple[str, ...], columns: str = COLUMNS) -> IOProbe:
    """The ``bad`` spoiled rows are quarantined with a reason naming ``mentions``, the rest accepted,
    every row counted; all rows bad: exit 2 with one error line (after the warnings) naming it."""

    def run(tmp: Path) -> Verdict:
        path = log_file("log.csv", spoil)(tmp)
        rc, out, err = cli(argv(str(path), columns))
        if "Traceback" in out + err or "internal error" in err:
            return "traceback", err.strip().splitlines()[-1]
        counts = _summary(out)
        if counts is None:
            return "accepted", f"exit {rc} without a summary: {err.strip()[-300:]}"
        if counts != (ROWS, ROWS - bad, bad):
            return "lost", f"rows in, accepted, quarantined = {counts}, expected {(ROWS, ROWS - bad, bad)}"
        errors = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
        if bad == ROWS:
            if rc != 2 or len(errors) != 1:
                return "accepted", f"exit {rc}, {len(errors)} error line(s) for a log of bad rows: {err[-300:]}"
            missing = [m for m in mentions if m not in errors[0]]
            return ("accepted", f"the error does not mention {missing[0]!r}: {errors[0][:400]}") if missing else None
        if rc != 0 or errors:
            return "accepted", f"exit {rc} for a log with {bad} bad row(s): {err.strip()[-300:]}"
        return _reason_stored(tmp, mentions)

    return IOProbe(f"import_{id}", run)


def _reason_stored(tmp: Path, mentions: tuple[str, ...]) -> Verdict:
    files = list((tmp.parent.parent / "store").glob("quarantine/**/*.parquet"))
    reasons = " ".join(" ".join(pd.read_parquet(f)["quarantine_reason"].astype(str)) for f in files)
    missing = [m for m in mentions if m not in reasons]
    return ("lost", f"no quarantine reason names {missing[0]!r}: {reasons[:300]!r}") if missing else None


def imported(id: str, spoil: Spoil, look: Callable[[pd.DataFrame, str], str | None]) -> IOProbe:
    """Exit 0, every row accepted; ``look(stored rows, stderr)`` says what is wrong, if anything."""

    def run(tmp: Path) -> Verdict:
        path = log_file("log.csv", spoil)(tmp)
        rc, out, err = cli(argv(str(path)))
        if rc != 0:
            return "accepted", f"a valid log was refused (exit {rc}): {err.strip()[-300:]}"
        if _summary(out) != (ROWS, ROWS, 0):
            return "lost", f"summary {_summary(out)}, expected every one of {ROWS} rows accepted"
        files = list((tmp.parent.parent / "store").glob("traces/**/*.parquet"))
        stored = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        problem = look(stored, err)
        return None if problem is None else ("accepted", problem)

    return IOProbe(f"import_{id}", run)


def _stored_in(year: int) -> Callable[[pd.DataFrame, str], str | None]:
    def look(stored: pd.DataFrame, err: str) -> str | None:
        years = sorted(set(pd.to_datetime(stored["ts"], utc=True).dt.year))
        return None if years == [year] else f"stored in year(s) {years}, expected {year}"

    return look


def _said(text: str) -> Callable[[pd.DataFrame, str], str | None]:
    return lambda stored, err: None if text in err else f"no warning says {text!r}: {err.strip()[-300:]!r}"


def _null_rewards(stored: pd.DataFrame, err: str) -> str | None:
    return None if stored["reward_total"].isna().all() else "a missing reward was stored as a number"


def fifo(tmp: Path) -> Path:
    path = tmp / "pipe.csv"
    if not path.exists():
        os.mkfifo(path)
    return path


def folder(tmp: Path) -> Path:
    (tmp / "log.csv").mkdir(exist_ok=True)
    return tmp / "log.csv"


def dangling(tmp: Path) -> Path:
    path = tmp / "log.csv"
    if not path.is_symlink():
        path.symlink_to(tmp / "gone.csv")
    return path


def month_long(log: pd.DataFrame) -> pd.DataFrame:
    return log.assign(shown_at=[(START + timedelta(days=1.5 * i)).isoformat() for i in range(len(log))])


def naive(log: pd.DataFrame) -> pd.DataFrame:
    return log.assign(shown_at=[s[:19] for s in log["shown_at"]])


def epoch_seconds(log: pd.DataFrame) -> pd.DataFrame:
    return log.assign(shown_at=[int((START + timedelta(minutes=i)).timestamp()) for i in range(len(log))])


def mapped(id: str, text: str, mentions: tuple[str, ...], columns: str | None = COLUMNS) -> IOProbe:
    """A ``--mapping`` file of ``text`` beside the good log."""
    return refused(f"mapping_{id}", log_file(), mentions, columns=columns, mapping=text)


def mask_log(log: pd.DataFrame) -> pd.DataFrame:
    return log.assign(mask="11")


def latin_1_mapping(tmp: Path) -> Verdict:
    (tmp / "m.yaml").write_bytes("actions:\n  'é': x\n".encode("latin-1"))
    args = argv(str(log_file()(tmp)), COLUMNS, "recsys", "--mapping", str(tmp / "m.yaml"))
    return expect_cli_error(args, 2, ("m.yaml", "not UTF-8"))


MASKED = COLUMNS + ",action_mask=mask"

PROBES = [
    imported("control", lambda log: log, lambda stored, err: None),
    # ---- files that are no decision log
    refused("empty-csv", raw("log.csv", b""), ("not a readable csv",)),
    refused("empty-jsonl", raw("log.jsonl", b""), ("no rows",)),
    refused("empty-parquet", raw("log.parquet", b""), ("not a readable parquet",)),
    refused("header-only", raw("log.csv", "visit,shown_at,item,pscore,click\n"), ("no rows",)),
    refused("random-bytes", raw("log.csv", os.urandom(300)), ("not a readable csv",)),
    refused("latin-1", raw("log.csv", "visit,shown_at\nvé,x\n".encode("latin-1")), ("not a readable csv",)),
    refused("utf-16", raw("log.csv", "visit,shown_at\nv1,x\n".encode("utf-16")), ("not a readable csv",)),
    refused("csv-named-parquet", raw("log.parquet", "visit\nv1\n"), ("not a readable parquet",)),
    refused("gz-not-gzip", raw("log.csv.gz", b"not gzip"), ("log.csv.gz", "not a readable")),
    refused("xlsx", raw("log.xlsx", b"PK"), ("expected a file ending in",)),
    refused("a-folder", folder, ("a folder; expected a file",)),
    refused("a-fifo", fifo, ("not a regular file",)),
    refused("dev-null", lambda tmp: "/dev/null", ("expected a file ending in",)),
    refused("dangling-link", dangling, ("no such file",)),
    refused("missing", lambda tmp: tmp / "nowhere.csv", ("nowhere.csv", "no such file")),
    refused("glob", lambda tmp: tmp / "*.csv", ("*.csv", "no such file")),
    refused("traversal", lambda tmp: "../../../../../../etc/passwd.csv", ("passwd.csv", "no such file")),
    refused("path-5000-chars", lambda tmp: "/tmp/" + "a" * 5000 + ".csv", ("File name too long",)),
    refused("nul-byte", lambda tmp: "/tmp/a\0b.csv", ("cannot read it",)),
    refused("empty-path", lambda tmp: "", ("expected a file ending in",)),
    refused("ftp-uri", lambda tmp: "ftp://host/log.csv", ("unsupported storage URI",)),
    refused("jsonl-of-arrays", raw("log.jsonl", "[1, 2, 3]\n"), ("columns the log does not have",)),
    # ---- --columns and --policy-version
    refused("columns-no-log-side", log_file(), ("'episode_id='", "TRACE=LOG"), columns="episode_id="),
    refused("columns-no-trace-side", log_file(), ("'=visit'", "TRACE=LOG"), columns="=visit"),
    refused("columns-twice", log_file(), ("'episode_id' is given twice",), columns=COLUMNS + ",episode_id=item"),
    refused("columns-unknown", log_file(), ("'bogus' is no trace column",), columns=COLUMNS + ",bogus=visit"),
    refused("columns-typo", log_file(), ("did you mean 'reward_total'",), columns=COLUMNS + ",reward_totl=click"),
    refused("columns-scenario", log_file(), ("'scenario' is set by the import",), columns=COLUMNS + ",scenario=visit"),
    refused("columns-absent", log_file(), ("columns the log does not have", "nope"), columns=COLUMNS + ",step=nope"),
    refused("columns-only-commas", log_file(), ("no ts column", "--columns ts="), columns=",,,"),
    refused("steps-without-episodes", log_file(), ("needs an episode column",), columns="ts=shown_at,step=pscore"),
    refused("policy-empty", log_file(), ("--policy-version NAME",), policy=""),
    refused("policy-blank", log_file(), ("--policy-version '   '", "not blank"), policy="   "),
    refused("policy-newline", log_file(), ("--policy-version", "printable"), policy="a\nerror: forged"),
    refused("deterministic-and-propensity", log_file(), ("--deterministic", "'pscore'"), extra=("--deterministic",)),
    # ---- --mapping files
    mapped("a-list", "- a\n- b\n", ("expected a YAML mapping",)),
    mapped("text", "hello\n", ("expected a YAML mapping",)),
    mapped("unknown-key", "colums:\n  a: b\n", ("['colums']",)),
    mapped("bad-yaml", "columns: [a\n", ("not valid YAML at line",)),
    mapped("python-tag", "actions: !!python/object/apply:os.system ['true']\n", ("not valid YAML",)),
    mapped("actions-a-list", "actions: [a, b]\n", ("actions is a list",)),
    mapped("columns-a-text", "columns: hello\n", ("columns is a str",)),
    mapped("constants-a-list", "constants: [1]\n", ("constants is a list",)),
    mapped("column-null", "columns:\n  episode_id: null\n", ("'episode_id': None",), columns=None),
    mapped("column-nested", "columns:\n  episode_id: {a: b}\n", ("no pair of names",), columns=None),
    mapped("action-unknown", "actions:\n  '1': free_money\n", ("['free_money'] are not actions",)),
    mapped("action-empty", "actions:\n  '1': ''\n", ("maps to an empty name",)),
    mapped("conflicts-columns", "columns:\n  episode_id: item\n", ("mapped twice", "'item'", "'visit'")),
    mapped("mask-a-text", "mask_actions: abc\n", ("mask_actions is a str",)),
    mapped("mask-unknown", "mask_actions: [offer_books_4, teleport]\n", ("['teleport'] are no actions",)),
    mapped("mask-twice", "mask_actions: [offer_books_4, offer_books_4]\n", ("more than one position",)),
    mapped("constant-text-reward", "constants:\n  latency_ms: lots\n", ("latency_ms is 'lots'", "a number")),
    mapped("constant-list", "constants:\n  step: [1, 2]\n", ("one plain value",)),
    mapped("constant-null", "constants:\n  done: null\n", ("one plain value",)),
    mapped("constant-bool-number", "constants:\n  latency_ms: true\n", ("a number",)),
    mapped("constant-fraction-step", "constants:\n  step: 0.5\n", ("whole number",)),
    mapped("constant-number-policy", "constants:\n  policy_version: 7\n", ("expected text",)),
    mapped("constant-unknown", "constants:\n  bogus: 1\n", ("'bogus' is no trace column",)),
    mapped("constant-scenario", "constants:\n  scenario: other\n", ("set by the import",)),
    mapped("constant-and-column", "constants:\n  reward_total: 1.0\n", ("both a log column and a constant",)),
    refused("mapping-missing", log_file(), ("mapping", "no such file"), extra=("--mapping", "/nonexistent/m.yaml")),
    refused("mapping-a-folder", log_file(), ("mapping", "a folder"), extra=("--mapping", "/tmp")),
    IOProbe("import_mapping-latin-1", lambda tmp: latin_1_mapping(tmp)),
    # ---- times
    refused("ts-unreadable", log_file(spoil=spoiled(shown_at="yesterday")), ("no row has a readable timestamp",)),
    refused("ts-all-future", log_file(spoil=spoiled(shown_at="2999-01-01T00:00:00Z")), ("in the future",)),
    refused("ts-all-year-1", log_file(spoil=spoiled(shown_at="0001-01-01T00:00:00Z")), ("before 1971",)),
    refused("ts-a-month", log_file(spoil=month_long), ("one import covers at most 7 days", "'shown_at'")),
    quarantined("ts-one-future", first("shown_at", "2999-01-01T00:00:00+00:00"), 1, ("in the future",)),
    quarantined("ts-one-epoch-zero", first("shown_at", "1970-01-01T00:00:00+00:00"), 1, ("before 1971",)),
    imported("ts-no-zone", naive, _said("carry no time zone: read as UTC")),
    imported("ts-epoch-seconds", epoch_seconds, _stored_in(2026)),
    # ---- rows that are bad one by one: quarantined, counted, the reason kept
    quarantined("propensity-above-1", spoiled(pscore=1.5), ROWS, ("propensity '1.5'", "(0, 1]")),
    quarantined("propensity-zero", spoiled(pscore=0), ROWS, ("propensity '0'",)),
    quarantined("propensity-negative", spoiled(pscore=-0.2), ROWS, ("propensity '-0.2'",)),
    quarantined("propensity-text", spoiled(pscore="high"), ROWS, ("propensity 'high'",)),
    quarantined("propensity-one-row", first("pscore", 7.0), 1, ("propensity '7.0'",)),
    quarantined("reward-400-digits", spoiled(click="9" * 400), ROWS, ("reward_total", "not a finite number")),
    quarantined("reward-infinite", spoiled(click=float("inf")), ROWS, ("Infinity",)),
    quarantined("action-unknown", spoiled(item="free_money"), ROWS, ("in_set[action]",)),
    quarantined("step-negative", spoiled(turn=-1), ROWS, ("below the minimum 0",), columns=COLUMNS + ",step=turn"),
    quarantined("step-text", spoiled(turn="first"), ROWS, ("got str 'first'",), columns=COLUMNS + ",step=turn"),
    refused("mask-width", log_file(spoil=mask_log), ("action_mask has 2 positions", "mask_actions"), columns=MASKED),
    imported("reward-missing", spoiled(click=float("nan")), _null_rewards),
]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_import_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

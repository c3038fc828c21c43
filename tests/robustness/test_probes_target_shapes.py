"""More shapes of ``rlops model evaluate --target`` than ``test_probes_ope_targets.py`` tries: a
JSON document or YAML instead of a table, probabilities nested in one column, true/false flags,
percentages, headers that differ by a space or a letter's case or repeat, step indices that are
negative, fractional or huge, a value a hair below 0, hexadecimal text, lists, null, lines of arrays;
versions that are negative, fractional, too large, empty or nested; ``--greedy`` beside a file or
uniform, which have no choice of their own to be greedy with. Each ends in exit 2 with one line
naming the problem. Controls: numbers written as text, blank lines and a byte-order mark are read
as what they say. One test per probe."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.ope_target_kit import RUN_KEY, SCENARIO, logged_rows, logging_probabilities, write_table, write_window

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, ids, run_probe

ARGV = ["model", "evaluate", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--direct-method", "none"]


def _window() -> None:
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    write_window(ctx.storage, ctx.uri, logged_rows())


@functools.lru_cache(maxsize=1)
def _probs() -> pd.DataFrame:
    return logging_probabilities(logged_rows())


def probs() -> pd.DataFrame:
    """The logger's probabilities of every action on each logged row (a copy: a probe may spoil it)."""
    return _probs().copy()


def actions() -> list[str]:
    return [str(c) for c in _probs().columns[1:]]


def refused(id: str, target: Callable[[Path], str], mentions: tuple[str, ...], extra: tuple[str, ...] = ()) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        _window()
        return expect_cli_error([*ARGV, "--target", target(tmp), *extra], 2, mentions)

    return IOProbe(f"shape_{id}", run)


def read(id: str, target: Callable[[Path], str]) -> IOProbe:
    """A file that says the logger's probabilities in another form: exit 0, DR = the logged return."""

    def run(tmp: Path) -> Verdict:
        _window()
        rc, out, err = cli([*ARGV, "--target", target(tmp), "--json"])
        if rc != 0:
            return "accepted", f"a valid file was refused (exit {rc}): {err.strip()[-300:]}"
        doc = json.loads(out)
        dr, logged = doc["estimates"]["dr"]["value"], doc["logged_return"]
        return None if abs(dr - logged) <= 1e-5 * max(1.0, abs(logged)) else ("accepted", f"DR {dr} != {logged}")

    return IOProbe(f"shape_{id}", run)


def text(name: str, make: Callable[[], str | bytes]) -> Callable[[Path], str]:
    def write(tmp: Path) -> str:
        content = make()
        (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(tmp / name)

    return write


def table(name: str, spoil: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], str]:
    return lambda tmp: str(write_table(spoil(probs()), tmp / name))


def json_lines(row: Callable[[dict[str, object]], dict[str, object]]) -> Callable[[], str]:
    return lambda: "\n".join(json.dumps(row(r)) for r in probs().to_dict("records")) + "\n"


def flags(r: dict[str, object]) -> dict[str, object]:
    """The most probable action true, every other false."""
    names = actions()
    best = max(names, key=lambda a: float(r[a]))  # type: ignore[arg-type]
    return {"trace_id": r["trace_id"], **{a: a == best for a in names}}


def header(old: str, new: str) -> Callable[[], str]:
    return lambda: probs().to_csv(index=False).replace(old, new, 1)


def first_action(value: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def spoil(t: pd.DataFrame) -> pd.DataFrame:
        a = t.columns[1]
        return t.astype({a: object}).assign(**{a: [value] * len(t)})

    return spoil


def below_zero_by_a_hair(t: pd.DataFrame) -> pd.DataFrame:
    a, b = t.columns[1], t.columns[2]
    return t.assign(**{a: t[a] - 1e-12, b: t[b] + 1e-12})


def logger(tmp: Path) -> str:
    return str(write_table(probs(), tmp / "logger.parquet"))


PROBES = [
    read("numbers-as-text", text("text.jsonl", json_lines(lambda r: {k: str(v) for k, v in r.items()}))),
    read(
        "blank-lines", text("blank.jsonl", lambda: probs().to_json(orient="records", lines=True).replace("\n", "\n\n"))
    ),
    read("byte-order-mark", text("bom.csv", lambda: "\ufeff" + probs().to_csv(index=False))),
    # ---- no table of probabilities
    refused("json-document", text("p.json", lambda: probs().to_json(orient="records")), ("expected a .parquet",)),
    refused("yaml", text("p.yaml", lambda: "trace_id: [a]\n"), ("expected a .parquet",)),
    refused("csv-gz", text("p.csv.gz", lambda: b"\x1f\x8b"), ("expected a .parquet",)),
    refused("nested-column", text("n.jsonl", json_lines(lambda r: {"trace_id": r["trace_id"], "p": r})), ("'p'",)),
    refused("lines-of-arrays", text("a.jsonl", lambda: "[1, 2, 3]\n"), ("column '0' is neither",)),
    refused("flags", text("f.jsonl", json_lines(flags)), ("true/false, not a number",)),
    refused("percentages", table("pct.csv", lambda t: t.assign(**{a: t[a] * 100 for a in t.columns[1:]})), ("100",)),
    refused("header-space", text("sp.csv", lambda: header(actions()[0], " " + actions()[0])()), ("neither",)),
    refused("header-case", text("case.csv", header("trace_id", "Trace_ID")), ("'Trace_ID' is neither",)),
    refused("header-twice", text("dup.csv", lambda: header(actions()[1], actions()[0])()), (".1' is neither",)),
    refused("only-trace-ids", text("ids.csv", lambda: "trace_id\nlive-0-0\n"), ("no column for action",)),
    refused("ids-as-numbers", table("ni.parquet", lambda t: t.assign(trace_id=range(len(t)))), ("no probabilities",)),
    refused("no-rows-parquet", table("e.parquet", lambda t: t.iloc[:0]), ("no probabilities for",)),
    refused("step-negative", table("sn.csv", lambda t: t.assign(step=-1)), ("step -1 is not a step index",)),
    refused("step-fraction", table("sf.csv", lambda t: t.assign(step=0.5)), ("step 0.5 is not a step index",)),
    refused("step-huge", table("sh.csv", lambda t: t.assign(step=1e12)), ("step 1e+12 is not a step index",)),
    refused("below-zero-by-a-hair", table("h.parquet", below_zero_by_a_hair), ("-1e-12, below 0",)),
    refused("hex-text", table("hex.csv", first_action("0x1p-1")), ("'0x1p-1', not a finite number",)),
    refused("a-list", table("l.parquet", first_action([0.5])), ("'[0.5]', not a finite number",)),
    refused(
        "nulls",
        text("nl.jsonl", json_lines(lambda r: {k: None if k != "trace_id" else v for k, v in r.items()})),
        ("nan",),
    ),
    # ---- versions and settings
    refused("version-negative", lambda tmp: "-1", ("'-1'", "expected rules, uniform")),
    refused("version-fraction", lambda tmp: "3.5", ("'3.5'", "expected rules, uniform")),
    refused("version-20-digits", lambda tmp: "9" * 20, ("expected rules, uniform",)),
    refused("version-empty", lambda tmp: f"{SCENARIO}-policy/", ("expected rules, uniform",)),
    refused("version-nested", lambda tmp: f"{SCENARIO}-policy/1/2", ("expected rules, uniform",)),
    refused("alias-with-version", lambda tmp: "champion/1", ("expected rules, uniform",)),
    refused("version-zero", lambda tmp: "0", ("has no version 0",)),
    refused("greedy-with-a-file", logger, ("--greedy goes with --target rules or a policy version",), ("--greedy",)),
    refused("greedy-with-uniform", lambda tmp: "uniform", ("--greedy goes with",), ("--greedy",)),
]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_target_shape_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

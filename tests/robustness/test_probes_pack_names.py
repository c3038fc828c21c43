"""Pack-name probes: a scenario name is a key of the trace store (``scenario=<name>`` partitions read
through DuckDB), of the registry and of the DAG ids. A copied pack folder that keeps its original's
``name:``, a name carrying glob characters (``cred?t_approval``, ``credit_approva*``,
``[c]redit_approval``) from the command line, params or a DAG run's conf, a storage root or a file
whose path holds them: each must be refused with one line, or read literally — never one pack's
rows replaced by, mixed with or missing for another's. One test per probe."""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, expect_error, run_probe

GOOD = "credit_approval"
RUN_KEY = "20260105T1000"
GLOB_NAMES = {"question-mark": "cred?t_approval", "star": "credit_approva*", "bracket": "[c]redit_approval"}


def packs(tmp: Path, **copies: str) -> Path:
    """A scenarios folder holding the credit pack and, for each ``folder=name``, a copy of it in
    ``folder`` whose ``scenario.yaml`` says ``name: <name>``."""
    from rlops.common.config import REPO_ROOT

    root = tmp / "scenarios"
    src = REPO_ROOT / "scenarios" / GOOD
    shutil.copytree(src, root / GOOD, ignore=shutil.ignore_patterns("__pycache__"))
    for folder, name in copies.items():
        shutil.copytree(src, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
        # double-quoted: a YAML string whatever the name holds ('[c]…' would be a flow sequence)
        doc = (root / folder / "scenario.yaml").read_text().replace(f"name: {GOOD}", f"name: {json.dumps(name)}", 1)
        (root / folder / "scenario.yaml").write_text(doc)
    return root


def partition_files(tmp: Path, scenario: str) -> dict[str, bytes]:
    """Every file of ``scenario``'s partitions in the probe's trace store, with its bytes."""
    folder = tmp / "store" / "traces" / f"scenario={scenario}"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def capture(scenario: str) -> tuple[int, str, str]:
    return cli(["capture", "--scenario", scenario, "--simulate", "--episodes", "16", "--run-key", RUN_KEY])


def copied_pack(folder: str, *others: str) -> Callable[[Path], Verdict]:
    """A copy of the credit pack in ``folder`` keeping ``name: credit_approval`` (beside the packs
    ``others``, which keep theirs): capturing it is refused with one line naming both names, and
    the credit pack's partition of that hour is left as it was."""

    def run(tmp: Path) -> Verdict:
        packs(tmp, **{folder: GOOD}, **{o: o for o in others})
        rc, _, err = capture(GOOD)
        if rc != 0:
            return "accepted", f"the good pack's capture failed: exit {rc}: {err.strip()[-300:]}"
        before = partition_files(tmp, GOOD)
        verdict = expect_cli_error(
            ["capture", "--scenario", folder, "--simulate", "--episodes", "16", "--run-key", RUN_KEY],
            mentions=(repr(folder), repr(GOOD), "name:"),
        )
        after = partition_files(tmp, GOOD)
        if after != before:
            return "lost", f"the copy rewrote {GOOD}'s partition of the hour: {sorted(after)}"
        if (tmp / "store" / "traces" / f"scenario={folder}").exists():
            return "accepted", f"the copy wrote a partition scenario={folder}"
        return verdict

    return run


def twin_names(tmp: Path) -> Verdict:
    """Two packs with one ``name:`` (``a_pack`` and ``b_pack`` both say ``b_pack``): the one whose
    folder says otherwise is refused by every command that takes a pack, the other runs."""
    root = tmp / "scenarios"
    packs(tmp, a_pack="b_pack", b_pack="b_pack")
    shutil.rmtree(root / GOOD)
    for argv in (
        ["capture", "--scenario", "a_pack", "--simulate", "--episodes", "16", "--run-key", RUN_KEY, "--dry-run"],
        ["env", "describe", "--scenario", "a_pack"],
        ["replay", "--scenario", "a_pack", "--trace-id", "t-0"],
        ["config", "show", "--scenario", "a_pack"],
        ["config", "validate", "--scenario", "a_pack"],
        ["config", "validate"],  # every pack the DAG files read: a_pack gets none
    ):
        verdict = expect_cli_error(argv, mentions=("'a_pack'", "'b_pack'"))
        if verdict:
            return verdict[0], f"rlops {' '.join(argv[:2])}: {verdict[1]}"
    rc, out, err = cli(["env", "describe", "--scenario", "b_pack", "--json"])
    return None if rc == 0 else ("accepted", f"the pack named after its folder was refused: {err.strip()[-300:]}")


def copied_pack_by_path(tmp: Path) -> Verdict:
    """The copy ``zz_copy`` (keeping ``name: credit_approval``) given as a pack folder path, not a
    name: the commands that take a path refuse it as they refuse the name, the env commands too
    (validating it "ok" would pass a pack every step then refuses)."""
    folder = str(packs(tmp, zz_copy=GOOD) / "zz_copy")
    for argv in (
        ["capture", "--scenario", folder, "--simulate", "--episodes", "16", "--run-key", RUN_KEY, "--dry-run"],
        ["env", "validate", "--scenario", folder],
        ["env", "describe", "--scenario", folder],
        ["env", "schema", "--scenario", folder],
        ["env", "rollout", "--scenario", folder, "--episodes", "2", "--out", str(tmp / "out.jsonl")],
    ):
        verdict = expect_cli_error(argv, mentions=("'zz_copy'", repr(GOOD), "name:"))
        if verdict:
            return verdict[0], f"rlops {' '.join(argv[:2])}: {verdict[1]}"
    return None


def glob_name_on_the_command_line(name: str) -> Callable[[Path], Verdict]:
    """A pack folder named ``name`` (and saying so): every command refuses the name with one line
    before it reads or writes a partition, and nothing is written for it."""

    def run(tmp: Path) -> Verdict:
        packs(tmp, **{name: name})
        for argv in (
            ["capture", "--scenario", name, "--simulate", "--episodes", "16", "--run-key", RUN_KEY],
            ["replay", "--scenario", name, "--trace-id", f"{GOOD}-{RUN_KEY}-0-0"],
            ["audit", "--scenario", name, "--dry-run"],
            ["env", "describe", "--scenario", name],
        ):
            verdict = expect_cli_error(argv, mentions=(repr(name), "letters, digits"))
            if verdict:
                return verdict[0], f"rlops {argv[0]}: {verdict[1]}"
        traces = tmp / "store" / "traces"
        written = sorted(p.name for p in traces.iterdir()) if traces.is_dir() else []
        return ("accepted", f"partitions written: {written}") if written else None

    return run


def glob_name_in_params(name: str) -> Callable[[Path], Verdict]:
    """``scenario: <name>`` in the params file: a command without ``--scenario`` refuses it with
    one line naming the params key."""

    def run(tmp: Path) -> Verdict:
        from rlops.common.config import REPO_ROOT

        packs(tmp, **{name: name})
        doc = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
        doc["scenario"] = name
        params = tmp / "params.yaml"
        params.write_text(yaml.safe_dump(doc))
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RLOPS_PARAMS", str(params))
            return expect_cli_error(
                ["capture", "--simulate", "--episodes", "16", "--run-key", RUN_KEY],
                mentions=("params 'scenario'", repr(name)),
            )

    return run


def glob_name_in_dag_conf(name: str) -> Callable[[Path], Verdict]:
    """A DAG run's conf naming ``name`` (a caller that bypasses the DAG's typed Params): the first
    task refuses it, naming it."""

    def run(tmp: Path) -> Verdict:
        from rlops.pipeline_steps.orchestration.run_conf import validate_conf

        packs(tmp, **{name: name})
        conf = {"scenario": name, "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": False}
        return expect_error(lambda: validate_conf(conf), 2, (repr(name), "letters, digits"))

    return run


@functools.lru_cache(maxsize=1)
def rows() -> pd.DataFrame:
    """Twelve rule-engine episodes of credit_approval, as the sandbox writes them."""
    from rlops.common.config import REPO_ROOT
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / GOOD, check_liveness=False)
    return rollout_traces(pack, rule_policy, 12, seed=5)


def store_beside(hostile: str, neighbour: str) -> Callable[[Path], Verdict]:
    """A store folder named ``hostile`` beside one named ``neighbour`` that its glob would match,
    each holding its own rows under the same partition path: each reads exactly its own rows."""

    def run(tmp: Path) -> Verdict:
        from rlops.storage.backend import Storage
        from rlops.trace_store.engine import QueryEngineConfig
        from rlops.trace_store.query import TraceReader

        df = rows()
        own, other = df.iloc[: len(df) // 3], df.iloc[len(df) // 3 :]
        for folder, part in ((hostile, own), (neighbour, other)):
            path = tmp / folder / "scenario=x" / "date=2026-01-05" / "hour=10" / "part-0.parquet"
            path.parent.mkdir(parents=True)
            part.to_parquet(path, index=False)
        reader = TraceReader(Storage(root_uri="file:///"), QueryEngineConfig())
        for folder, part in ((hostile, own), (neighbour, other)):
            uri = f"file://{tmp / folder}"
            got = reader.read(uri, columns=["trace_id"])
            if sorted(got["trace_id"]) != sorted(part["trace_id"]):
                return "accepted", f"{folder!r} read {len(got)} rows, holds {len(part)}"
            if reader.count(uri) != len(part):
                return "accepted", f"{folder!r} counted {reader.count(uri)} rows, holds {len(part)}"
        return None

    return run


def drift_detect_literal(tmp: Path) -> Verdict:
    """``rlops drift detect --baseline 'a*.parquet' --target 'a*.parquet'`` beside ``ab.parquet``:
    both sides read the file of that name, the same rows."""
    df = rows()
    (tmp / "t").mkdir()
    df.iloc[: len(df) // 2].to_parquet(tmp / "t" / "a*.parquet", index=False)
    df.to_parquet(tmp / "t" / "ab.parquet", index=False)
    path = str(tmp / "t" / "a*.parquet")
    argv = ["drift", "detect", "--baseline", path, "--target", path, "--no-track", "--dry-run", "--json"]
    rc, out, err = cli(argv)
    if rc != 0:
        return "accepted", f"exit {rc}: {err.strip()[-300:]}"
    report = json.loads(out)
    n = (report["n_baseline_rows"], report["n_target_rows"])
    return None if n == (len(df) // 2,) * 2 else ("accepted", f"rows read (baseline, target): {n}")


PROBES = [
    IOProbe("pack-identity-copied-pack", copied_pack("zz_copy"), timeout_s=120),
    IOProbe("pack-identity-twin-names", twin_names, timeout_s=120),
    IOProbe("pack-identity-copied-pack-by-path", copied_pack_by_path, timeout_s=120),
    *(
        IOProbe(f"pack-name-glob-cli-{k}", glob_name_on_the_command_line(n), timeout_s=120)
        for k, n in GLOB_NAMES.items()
    ),
    *(IOProbe(f"pack-name-glob-params-{k}", glob_name_in_params(n), timeout_s=120) for k, n in GLOB_NAMES.items()),
    *(IOProbe(f"pack-name-glob-conf-{k}", glob_name_in_dag_conf(n), timeout_s=120) for k, n in GLOB_NAMES.items()),
    IOProbe("store-path-glob-question-mark", store_beside("st?re", "store")),
    IOProbe("store-path-glob-star", store_beside("s*", "store")),
    IOProbe("store-path-glob-bracket", store_beside("[s]tore", "store")),
    IOProbe("store-path-glob-partition", store_beside("scenario=cred?t_approval", "scenario=credit_approval")),
    IOProbe("drift-detect-glob-both-sides", drift_detect_literal, timeout_s=120),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_pack_name_probe(probe: IOProbe, tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLOPS_SCENARIOS_DIR", str(tmp_path / probe.id / "scenarios"))
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp_path / probe.id / 'store'}")
    check(run_probe(probe, tmp_path))

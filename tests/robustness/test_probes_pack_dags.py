"""Pack-folder probes: every folder with a ``scenario.yaml`` under the scenarios folder gets its own
DAGs, ``<kind>__<folder name>``. A hostile folder name (spaces, unicode, 300 characters, quotes) or
hostile pack params (a bad value, YAML tags, billion laughs, NaN, a folder or a FIFO as the params
file, non-UTF-8) must cost only that pack its DAGs, with a reason naming it — never the other packs'
DAGs, never two packs on one DAG id, never a hang. One test per probe."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .io_harness import IOProbe, Verdict, check, run_probe
from .probes_packs import bomb

GOOD = "credit_approval"


def scenarios(tmp: Path, *names: str) -> Path:
    """A scenarios folder holding the packs ``names`` (only what the DAG settings read: a
    scenario.yaml and the pack's reward files; the repository's credit_approval params for GOOD)."""
    from rlops.common.config import REPO_ROOT

    root = tmp / "scenarios"
    for name in (GOOD, *names):
        pack = root / name
        pack.mkdir(parents=True, exist_ok=True)
        (pack / "scenario.yaml").write_text("name: probe\n")
        (pack / "reward_v1.py").write_text("")
        if name == GOOD:
            (pack / "params.yaml").write_text((REPO_ROOT / "scenarios" / GOOD / "params.yaml").read_text())
    return root


def read_packs(root: Path) -> tuple[dict[str, object], dict[str, str]]:
    """``({pack: config}, {pack: reason})`` of the DAG settings over ``root``."""
    from rlops.pipeline_steps.orchestration import settings

    old = os.environ.get("RLOPS_SCENARIOS_DIR")
    os.environ["RLOPS_SCENARIOS_DIR"] = str(root)
    try:
        configs = {c.scenario: c for c in settings.pack_dag_configs()}
        problems = {p.scenario: p.reason for p in settings.pack_problems()}
    finally:
        if old is None:
            del os.environ["RLOPS_SCENARIOS_DIR"]
        else:
            os.environ["RLOPS_SCENARIOS_DIR"] = old
    return configs, problems


def dag_ids(configs: dict[str, object]) -> list[str]:
    from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, dag_id

    return [dag_id(kind, name) for name in configs for kind in DAG_KINDS]


def good_pack_kept(configs: dict[str, object], problems: dict[str, str]) -> Verdict:
    if GOOD not in configs:
        return "lost", f"the good pack lost its DAGs: {problems.get(GOOD, 'no reason')[:200]}"
    ids = dag_ids(configs)
    if len(set(ids)) != len(ids):
        return "security", "two packs share a DAG id"
    return None


def folder_name(name: str, valid: bool) -> Callable[[Path], Verdict]:
    """A pack folder named ``name`` next to a good pack: DAGs of its own when the name can be a DAG
    id (distinct from every other pack's), else no DAGs and a reason naming the folder."""

    def run(tmp: Path) -> Verdict:
        from airflow.utils.helpers import validate_key

        root = scenarios(tmp, name)
        configs, problems = read_packs(root)
        lost = good_pack_kept(configs, problems)
        if lost:
            return lost
        if valid:
            if name not in configs:
                return "accepted", f"a valid name was refused: {problems.get(name, '')[:200]}"
            for i in dag_ids({name: None}):
                validate_key(i, max_length=250)  # Airflow's own rule: a ValueError is a finding
            return None
        if name in configs:
            return "accepted", f"{name[:40]!r} got DAGs Airflow would refuse (every DAG file of every pack fails)"
        reason = problems.get(name, "")
        shown = repr(name)[1:30]  # the reason shows the name as a literal: a tab or newline escaped
        ok = shown in reason and "rename the folder" in reason and "\n" not in reason
        return None if ok else ("accepted", f"reason: {reason!r}")

    return run


def twins(*names: str) -> Callable[[Path], Verdict]:
    """Folder names that a sanitiser would fold into one: each keeps DAG ids of its own."""

    def run(tmp: Path) -> Verdict:
        root = scenarios(tmp, *names)
        if len([p for p in root.iterdir() if p.name in names]) < len(names):
            return None  # the file system folds them (case-insensitive): they cannot both exist
        configs, problems = read_packs(root)
        lost = good_pack_kept(configs, problems)
        if lost:
            return lost
        missing = [n for n in names if n not in configs]
        return ("accepted", f"{missing} got no DAGs: {problems}") if missing else None

    return run


def pack_params(write: Callable[[Path], None], *mentions: str) -> Callable[[Path], Verdict]:
    """A pack whose params.yaml is hostile (written by ``write``) next to a good pack: the good pack
    keeps its DAGs; the bad one gets none, its reason naming the file and ``mentions``; in time."""

    def run(tmp: Path) -> Verdict:
        root = scenarios(tmp, "hostile")
        target = root / "hostile" / "params.yaml"
        write(target)
        configs, problems = read_packs(root)
        lost = good_pack_kept(configs, problems)
        if lost:
            return lost
        if "hostile" in configs:
            return "accepted", "a pack with hostile params got DAGs"
        reason = problems.get("hostile", "")
        missing = [m for m in ("hostile", *mentions) if m not in reason]
        if "\n" in reason:
            return "accepted", f"the reason spans lines: {reason[:200]!r}"
        return ("accepted", f"the reason lacks {missing[0]!r}: {reason[:300]!r}") if missing else None

    return run


def text(content: str | bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    return write


def fifo(path: Path) -> None:
    os.mkfifo(path)


def folder(path: Path) -> None:
    path.mkdir()


def dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.yaml")


NAMES: dict[str, tuple[str, bool]] = {
    "space": ("my pack", False),
    "leading-space": (" credit", False),
    "tab": ("a\tb", False),
    "newline": ("a\nb", False),
    "single-quote": ("o'brien", False),
    "double-quote": ('say"hi', False),
    "semicolon": ("a;b", False),
    "dollar": ("$HOME", False),
    "backtick": ("`id`", False),
    "emoji": ("pack🙂", False),
    "combining-accent": ("cafe\u0301", False),
    "zero-width-space": ("pack\u200b", False),
    "right-to-left": ("pack\u202egnp", False),
    "255-characters": ("p" * 255, False),  # the longest a file name can be (NAME_MAX)
    "one-over-airflow-limit": ("p" * 230, False),
    "at-airflow-limit": ("p" * 229, True),
    "three-dots": ("...", False),
    "double-dot-inside": ("a..b", False),
    "leading-dot": (".hidden", True),
    "leading-dash": ("-pack", True),
    "unicode-letters": ("café", True),
    "cjk": ("信用审批", True),
    "dots-and-dashes": ("credit.approval-v2", True),
    "double-underscore": ("a__b", True),
    "digits": ("2026", True),
}

TWINS: dict[str, tuple[str, ...]] = {
    "case": ("Credit_Approval", GOOD),
    "dot-vs-underscore": ("credit.approval", GOOD),
    "dash-vs-underscore": ("credit-approval", GOOD),
    "double-underscore-split": ("a__b", "a_b", "a"),
    "nfc-vs-ascii": ("café", "cafe"),
}

PARAMS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "bad-value": (text("train:\n  total_timesteps: abc\n"), ("train.total_timesteps",)),
    "unknown-key": (text("trian:\n  total_timesteps: 1000\n"), ("trian",)),
    "nan": (text("train:\n  learning_rate: .nan\n"), ("train.learning_rate", "finite")),
    "infinity": (text("train:\n  total_timesteps: .inf\n"), ("train.total_timesteps",)),
    "python-object-tag": (text('x: !!python/object/apply:os.system ["echo owned"]\n'), ("invalid YAML",)),
    "python-name-tag": (text("x: !!python/name:os.system\n"), ("invalid YAML",)),
    "billion-laughs": (text(bomb()), ("expands to more than",)),
    "not-a-mapping": (text("- a\n- b\n"), ("expected a mapping",)),
    "not-yaml": (text("train: [unclosed\n"), ("invalid YAML",)),
    "non-utf8": (text(b"train:\n  device: \xff\xfe\n"), ("UTF-8",)),
    "a-folder": (folder, ("folder",)),
    "a-fifo": (fifo, ("expected a regular file",)),
    "dangling-symlink": (dangling, ("No such file or directory",)),
    "scenarios-dir-override": (text("scenarios_dir: /nonexistent\nseed: -1.5\n"), ("seed",)),
}


def broken_pack_leaves_the_dag_folder_standing(tmp: Path) -> Verdict:
    """Through Airflow's own DagBag: with a misnamed pack and a pack with bad params next to a good
    one, every DAG of the good pack parses and the only import error is the one naming both."""
    import subprocess
    import sys

    from rlops.common.config import REPO_ROOT
    from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, dag_id

    root = scenarios(tmp, "my pack", "bad_params")
    (root / "bad_params" / "params.yaml").write_text("train:\n  total_timesteps: abc\n")
    script = (
        "import json; from airflow.dag_processing.dagbag import DagBag; "
        f"b = DagBag(dag_folder={str(REPO_ROOT / 'dags')!r}); "
        "print(json.dumps({'ids': sorted(b.dag_ids), 'errors': {k: v for k, v in b.import_errors.items()}}))"
    )
    env = {**os.environ, "RLOPS_SCENARIOS_DIR": str(root)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    import json

    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = {dag_id(kind, GOOD) for kind in DAG_KINDS}
    if set(got["ids"]) != want:
        return "lost", f"DAGs parsed: {got['ids']}; expected {sorted(want)}"
    errors = {Path(k).name: v for k, v in got["errors"].items()}
    if set(errors) != {"pack_problems.py"}:
        return "lost", f"import errors in {sorted(errors)}"
    last = errors["pack_problems.py"].strip().splitlines()[-1]
    return None if "my pack" in last and "bad_params" in last else ("accepted", f"the import error says {last!r}")


PROBES = [
    *(IOProbe(f"pack-name-{k}", folder_name(n, ok)) for k, (n, ok) in NAMES.items()),
    *(IOProbe(f"pack-twins-{k}", twins(*names)) for k, names in TWINS.items()),
    *(IOProbe(f"pack-params-{k}", pack_params(w, *m), timeout_s=20) for k, (w, m) in PARAMS.items()),
    IOProbe("pack-dagbag-one-broken-pack", broken_pack_leaves_the_dag_folder_standing, timeout_s=150),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_pack_dag_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))

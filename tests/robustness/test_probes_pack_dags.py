"""Pack-folder probes: every folder with a ``scenario.yaml`` under the scenarios folder gets its own
DAGs, ``<kind>__<folder name>``. A hostile folder name (spaces, unicode, glob characters, 300
characters, quotes), hostile pack params (a bad value, YAML tags, billion laughs, NaN, a folder or a
FIFO as the params file, non-UTF-8) or broken pack files (a ``scenario.yaml`` that is a folder, not
YAML or says another pack's ``name:``, a reward module that does not compile) must cost only that
pack its DAGs, with a reason naming it and the file — never the other packs' DAGs, never two packs
on one DAG id, never a hang. A scenarios folder that is missing or a file is an import error naming
it, not zero DAGs and no word. One test per probe."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .io_harness import IOProbe, Verdict, check, run_probe
from .probes_packs import bomb

GOOD = "credit_approval"


def scenarios(tmp: Path, *names: str) -> Path:
    """A scenarios folder holding the packs ``names`` (only what the DAG settings read: the credit
    pack's scenario.yaml under the folder's name and a reward module; the repository's
    credit_approval params for GOOD)."""
    from rlops.common.config import REPO_ROOT

    root = tmp / "scenarios"
    scenario = (REPO_ROOT / "scenarios" / GOOD / "scenario.yaml").read_text()
    for name in (GOOD, *names):
        pack = root / name
        pack.mkdir(parents=True, exist_ok=True)
        # double-quoted: a YAML string whatever the folder's name holds
        (pack / "scenario.yaml").write_text(scenario.replace(f"name: {GOOD}", f"name: {json.dumps(name)}", 1))
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
        configs: dict[str, object] = {c.scenario: c for c in settings.pack_dag_configs()}
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
    return pack_file("params.yaml", write, *mentions)


def pack_file(name: str, write: Callable[[Path], None], *mentions: str) -> Callable[[Path], Verdict]:
    """A pack whose file ``name`` is hostile (written by ``write``, after the old one is removed)
    next to a good pack: the good pack keeps its DAGs; the bad one gets none, its reason naming the
    pack, the file and ``mentions`` on one line; in time."""

    def run(tmp: Path) -> Verdict:
        root = scenarios(tmp, "hostile")
        target = root / "hostile" / name
        target.unlink(missing_ok=True)
        write(target)
        configs, problems = read_packs(root)
        lost = good_pack_kept(configs, problems)
        if lost:
            return lost
        if "hostile" in configs:
            return "accepted", f"a pack with a hostile {name} got DAGs"
        reason = problems.get("hostile", "")
        missing = [m for m in ("hostile", name, *mentions) if m not in reason]
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


def copied(name: str) -> Callable[[Path], None]:
    """The credit pack's scenario.yaml saying ``name: <name>``."""

    def write(path: Path) -> None:
        from rlops.common.config import REPO_ROOT

        doc = (REPO_ROOT / "scenarios" / GOOD / "scenario.yaml").read_text()
        path.write_text(doc.replace(f"name: {GOOD}", f"name: {json.dumps(name)}", 1))

    return write


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
    "one-over-name-limit": ("p" * 101, False),
    "at-name-limit": ("p" * 100, True),
    "three-dots": ("...", False),
    "double-dot-inside": ("a..b", False),
    # A name keys trace partitions read through DuckDB, registered models and DAG ids: ASCII
    # letters, digits, '_' and '-' only, first a letter or digit (see rlops.common.scenario_name).
    "leading-dot": (".hidden", False),
    "leading-dash": ("-pack", False),
    "leading-underscore": ("_pack", False),
    "unicode-letters": ("café", False),
    "cjk": ("信用审批", False),
    "dots-and-dashes": ("credit.approval-v2", False),
    "glob-question-mark": ("cred?t_approval", False),
    "glob-star": ("credit_approva*", False),
    "glob-bracket": ("[c]redit_approval", False),
    "glob-brace": ("{credit,loan}_approval", False),
    "backslash": ("credit\\approval", False),
    "dashes-and-underscores": ("credit-approval_v2", True),
    "double-underscore": ("a__b", True),
    "digits": ("2026", True),
}

TWINS: dict[str, tuple[str, ...]] = {
    "case": ("Credit_Approval", GOOD),
    "dash-vs-underscore": ("credit-approval", GOOD),
    "double-underscore-split": ("a__b", "a_b", "a"),
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

#: Broken pack files: ``{probe: (file, write, what the reason mentions)}``.
FILES: dict[str, tuple[str, Callable[[Path], None], tuple[str, ...]]] = {
    "scenario-not-yaml": ("scenario.yaml", text("name: hostile\nstate: [unclosed\n"), ("invalid YAML",)),
    "scenario-a-folder": ("scenario.yaml", folder, ("not a folder",)),
    "scenario-a-fifo": ("scenario.yaml", fifo, ("expected a regular file",)),
    "scenario-dangling-symlink": ("scenario.yaml", dangling, ("No such file or directory",)),
    "scenario-not-a-mapping": ("scenario.yaml", text("- a\n- b\n"), ("expected a mapping",)),
    "scenario-no-state": ("scenario.yaml", text("name: hostile\n"), ("missing required key 'state'",)),
    "scenario-non-utf8": ("scenario.yaml", text(b"name: hostile\x00\xff\n"), ("scenario.yaml",)),
    "scenario-python-tag": ("scenario.yaml", text("name: !!python/name:os.system\n"), ("invalid YAML",)),
    "scenario-billion-laughs": ("scenario.yaml", text(bomb()), ("expands to more than",)),
    "scenario-names-another-pack": ("scenario.yaml", copied(GOOD), ("name: 'credit_approval'", "folder")),
    "scenario-name-glob": ("scenario.yaml", copied("hostil?"), ("'hostil?'", "letters, digits")),
    "reward-syntax-error": ("reward_v1.py", text("def broken(:\n    pass\n"), ("reward_v1.py:1", "syntax error")),
    "reward-nul-byte": ("reward_v1.py", text(b"x = 1\x00\n"), ("syntax error",)),
    "reward-deep-nesting": ("reward_v1.py", text("x = " + "(" * 300 + ")" * 300 + "\n"), ("reward_v1.py",)),
    "reward-non-utf8": ("reward_v1.py", text(b"x = '\xff'\n"), ("UTF-8",)),
    "reward-a-folder": ("reward_v1.py", folder, ("not a folder",)),
    "reward-dangling-symlink": ("reward_v1.py", dangling, ("No such file or directory",)),
}


def dagbag(root: Path) -> tuple[set[str], dict[str, str]]:
    """Airflow's own DagBag over the repository's DAG folder with the packs of ``root``, in a fresh
    interpreter: the DAG ids it parsed, and its import errors by DAG file name."""
    import subprocess
    import sys

    from rlops.common.config import REPO_ROOT

    script = (
        "import json; from airflow.dag_processing.dagbag import DagBag; "
        f"b = DagBag(dag_folder={str(REPO_ROOT / 'dags')!r}); "
        "print(json.dumps({'ids': sorted(b.dag_ids), 'errors': {k: v for k, v in b.import_errors.items()}}))"
    )
    env = {**os.environ, "RLOPS_SCENARIOS_DIR": str(root)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return set(got["ids"]), {Path(k).name: v for k, v in got["errors"].items()}


def only_the_good_pack(root: Path, *mentions: str) -> Verdict:
    """Through the DagBag: every DAG of the good pack parses, and the only import error is the
    ``pack_problems.py`` one, its last line naming every one of ``mentions``."""
    from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, dag_id

    ids, errors = dagbag(root)
    want = {dag_id(kind, GOOD) for kind in DAG_KINDS}
    if ids != want:
        return "lost", f"DAGs parsed: {sorted(ids)}; expected {sorted(want)}"
    if set(errors) != {"pack_problems.py"}:
        return "accepted", f"import errors in {sorted(errors)}"
    last = errors["pack_problems.py"].strip().splitlines()[-1]
    missing = [m for m in mentions if m not in last]
    return ("accepted", f"the import error lacks {missing[0]!r}: {last[:600]!r}") if missing else None


def broken_pack_leaves_the_dag_folder_standing(tmp: Path) -> Verdict:
    """Through Airflow's own DagBag: with a misnamed pack and a pack with bad params next to a good
    one, every DAG of the good pack parses and the only import error is the one naming both."""
    root = scenarios(tmp, "my pack", "bad_params")
    (root / "bad_params" / "params.yaml").write_text("train:\n  total_timesteps: abc\n")
    return only_the_good_pack(root, "my pack", "bad_params")


def broken_pack_files_leave_the_dag_folder_standing(tmp: Path) -> Verdict:
    """Through the DagBag: packs whose scenario.yaml is not YAML, is a folder or names another
    pack, and one whose reward module does not compile, beside a good pack: the good pack keeps its
    seven DAGs, the broken ones get none, and the import error names each pack and its file."""
    root = scenarios(tmp, "bad_yaml", "yaml_folder", "zz_copy", "bad_reward")
    (root / "bad_yaml" / "scenario.yaml").write_text("name: bad_yaml\nstate: [unclosed\n")
    (root / "yaml_folder" / "scenario.yaml").unlink()
    (root / "yaml_folder" / "scenario.yaml").mkdir()
    copied(GOOD)(root / "zz_copy" / "scenario.yaml")
    (root / "bad_reward" / "reward_v1.py").write_text("def broken(:\n    pass\n")
    return only_the_good_pack(
        root,
        "bad_yaml/scenario.yaml:3: invalid YAML",
        "yaml_folder/scenario.yaml: expected a regular file",
        "zz_copy/scenario.yaml",
        "name: 'credit_approval'",
        "bad_reward/reward_v1.py:1: syntax error",
    )


def scenarios_folder(kind: str) -> Callable[[Path], Verdict]:
    """``RLOPS_SCENARIOS_DIR`` naming nothing, or a file: no DAGs, and an import error naming the
    folder and what is wrong with it — through the settings and through the DagBag."""

    def run(tmp: Path) -> Verdict:
        from rlops.pipeline_steps.orchestration import settings

        root = tmp / "no-such-scenarios"
        if kind == "a-file":
            root.write_text("credit_approval\n")
        what = "is not a folder" if kind == "a-file" else "does not exist"
        old = os.environ.get("RLOPS_SCENARIOS_DIR")
        os.environ["RLOPS_SCENARIOS_DIR"] = str(root)
        try:
            configs = settings.pack_dag_configs()
            try:
                settings.raise_pack_problems()
                raised = ""
            except settings.PackProblems as exc:
                raised = str(exc)
        finally:
            if old is None:
                del os.environ["RLOPS_SCENARIOS_DIR"]
            else:
                os.environ["RLOPS_SCENARIOS_DIR"] = old
        if configs:
            return "accepted", f"DAGs for {[c.scenario for c in configs]}"
        if str(root) not in raised or what not in raised or "\n" in raised:
            return "accepted", f"the pack_problems DAG file raised {raised[:300]!r}"
        ids, errors = dagbag(root)
        if ids:
            return "accepted", f"DAGs parsed: {sorted(ids)}"
        error = errors.get("pack_problems.py", "").strip().splitlines()
        if set(errors) != {"pack_problems.py"} or str(root) not in error[-1] or what not in error[-1]:
            return "accepted", f"import errors: {errors}"
        return None

    return run


PROBES = [
    *(IOProbe(f"pack-name-{k}", folder_name(n, ok)) for k, (n, ok) in NAMES.items()),
    *(IOProbe(f"pack-twins-{k}", twins(*names)) for k, names in TWINS.items()),
    *(IOProbe(f"pack-params-{k}", pack_params(w, *m), timeout_s=20) for k, (w, m) in PARAMS.items()),
    *(IOProbe(f"pack-files-{k}", pack_file(f, w, *m), timeout_s=20) for k, (f, w, m) in FILES.items()),
    IOProbe("pack-dagbag-one-broken-pack", broken_pack_leaves_the_dag_folder_standing, timeout_s=150),
    IOProbe("pack-dagbag-broken-pack-files", broken_pack_files_leave_the_dag_folder_standing, timeout_s=150),
    IOProbe("pack-dagbag-scenarios-folder-missing", scenarios_folder("missing"), timeout_s=150),
    IOProbe("pack-dagbag-scenarios-folder-a-file", scenarios_folder("a-file"), timeout_s=150),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_pack_dag_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))

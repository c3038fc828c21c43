"""Params probes: the project's params file (``RLOPS_PARAMS``) and the environment overrides are
read by every command and every DAG task. A hostile file — YAML tags that construct Python objects,
billion laughs, NaN and infinity, a boolean where a number belongs, a 5,000-digit integer, a folder,
a FIFO or a device in its place, non-UTF-8 text — and hostile overrides (a scenarios folder that is
a file, a storage URI of another scheme, a tracking or queue URI that is no URI) each end in one
``error:`` line naming the file or variable, exit code 2 (1 for a service that does not answer),
within the timeout and without running anything the file names. One test per probe."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, run_probe
from .probes_packs import bomb

VALIDATE = ["config", "validate"]
AUDIT = ["audit", "--scenario", "credit_approval", "--run-key", "20261130T0500", "--dry-run"]


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def params_file(
    write: Callable[[Path], None] | str | bytes, *mentions: str, argv: list[str] = VALIDATE
) -> Callable[[Path], Verdict]:
    """``RLOPS_PARAMS`` names ``params.yaml`` under the probe's folder, written by ``write`` (a text,
    bytes, or a function making the path); the command exits 2 with one line naming the file."""

    def run(tmp: Path) -> Verdict:
        path = tmp / "params.yaml"
        if callable(write):
            write(path)
        elif isinstance(write, bytes):
            path.write_bytes(write)
        else:
            path.write_text(write)
        with environment(RLOPS_PARAMS=str(path)):
            verdict = expect_cli_error(argv, 2, ("params", *mentions))
        if (tmp / "OWNED").exists():
            return "security", "the params file ran a command"
        return verdict

    return run


def params_path(value: str, *mentions: str) -> Callable[[Path], Verdict]:
    """``RLOPS_PARAMS`` set to ``value`` itself (``{tmp}`` the probe's folder)."""

    def run(tmp: Path) -> Verdict:
        with environment(RLOPS_PARAMS=value.replace("{tmp}", str(tmp))):
            return expect_cli_error(VALIDATE, 2, mentions)

    return run


def override(
    var: str, value: str, argv: list[str], mentions: tuple[str, ...], codes: tuple[int, ...] = (2,)
) -> Callable[[Path], Verdict]:
    """An environment override set to ``value`` over the repository's params: one line, exit in ``codes``."""

    def run(tmp: Path) -> Verdict:
        with environment(**{var: value.replace("{tmp}", str(tmp))}):
            rc, out, err = cli(argv)
            verdict = None
            for code in codes:
                verdict = expect_cli_error(argv, code, mentions) if rc == code else verdict
            if rc not in codes:
                return ("traceback" if "internal error" in err or "Traceback" in err else "accepted"), (
                    f"exit {rc}: {err.strip()[-300:]}"
                )
            return verdict

    return run


def fifo(path: Path) -> None:
    os.mkfifo(path)


def folder(path: Path) -> None:
    path.mkdir()


def file_named(name: str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / name).write_text("not a folder\n")

    return make


def scenarios_dir(make: Callable[[Path], None] | None, name: str) -> Callable[[Path], Verdict]:
    """``RLOPS_SCENARIOS_DIR`` naming something that is no folder: config validate says so."""

    def run(tmp: Path) -> Verdict:
        if make is not None:
            make(tmp)
        if name == "fifo":
            os.mkfifo(tmp / name)
        with environment(RLOPS_SCENARIOS_DIR=str(tmp / name)):
            return expect_cli_error(VALIDATE, 2, ("scenarios_dir", "not a folder"))

    return run


OWN = 'x: !!python/object/apply:os.system ["touch {tmp}/OWNED"]\n'

FILES: dict[str, tuple[Callable[[Path], None] | str | bytes, tuple[str, ...]]] = {
    "python-object-apply": (OWN, ("not valid YAML",)),
    "python-object-new": ("x: !!python/object/new:os.system [id]\n", ("not valid YAML",)),
    "python-name": ("x: !!python/name:os.system\n", ("not valid YAML",)),
    "python-module": ("x: !!python/module:os\n", ("not valid YAML",)),
    "unknown-local-tag": ("train: !secret total\n", ("not valid YAML",)),
    "billion-laughs-keys": (bomb(), ("expands to more than",)),
    "billion-laughs-value": (bomb() + "scenario: *a9\n", ("expands to more than",)),
    "billion-laughs-nested": ("train:\n  total_timesteps: 1\n" + bomb().replace("\n", "\n", 1) + "seed: *a8\n", ()),
    "deep-nesting": ("train: " + "[" * 20_000 + "]" * 20_000 + "\n", ("not valid YAML",)),
    "nan-float": ("train:\n  learning_rate: .nan\n", ("train.learning_rate", "finite")),
    "nan-int": ("seed: .nan\n", ("seed",)),
    "infinity": ("train:\n  learning_rate: .inf\n", ("train.learning_rate", "finite")),
    "minus-infinity": ("ope:\n  tolerance: -.inf\n", ("ope.tolerance",)),
    "boolean-for-a-number": ("seed: true\n", ("seed", "boolean")),
    "boolean-for-a-float": ("ope:\n  min_ess: false\n", ("ope.min_ess", "boolean")),
    "5000-digit-integer": ("train:\n  total_timesteps: " + "9" * 5000 + "\n", ("not valid YAML", "digits")),
    "top-level-list": ("- a\n- b\n", ("expected a mapping",)),
    "top-level-text": ("just text\n", ("expected a mapping",)),
    "block-a-list": ("train: [1, 2]\n", ("train",)),
    "unknown-block": ("trian:\n  total_timesteps: 1\n", ("trian", "did you mean")),
    "unclosed-bracket": ("train: [1, 2\n", ("not valid YAML",)),
    "tab-indent": ("train:\n\ttotal_timesteps: 1\n", ("not valid YAML",)),
    "non-utf8": (b"scenario: \xff\xfe\n", ("UTF-8",)),
    "utf16-bom": ("scenario: x\n".encode("utf-16"), ("UTF-8",)),
    "nul-byte": ("scenario: a\x00b\n", ()),
    "a-folder": (folder, ("is a folder",)),
    "a-fifo": (fifo, ("not a regular file",)),
    "ten-thousand-char-key": ("k" * 10_000 + ": 1\n", ("not valid YAML",)),
    # values that mean something else than they seem
    "memory-limit-zero": ("trace_store:\n  memory_limit: 0GB\n", ("trace_store.memory_limit", "2GB")),
    "memory-limit-word": ("trace_store:\n  memory_limit: lots\n", ("trace_store.memory_limit", "'lots'", "2GB")),
    "memory-limit-kilobytes": ("trace_store:\n  memory_limit: 10KB\n", ("trace_store.memory_limit", "at least")),
    "memory-limit-200-percent": ("trace_store:\n  memory_limit: 200%\n", ("trace_store.memory_limit", "100%")),
    "memory-limit-no-unit": ("trace_store:\n  memory_limit: 1000\n", ("trace_store.memory_limit", "2GB")),
    "total-timesteps-1e30": ("train:\n  total_timesteps: " + "1" + "0" * 30 + "\n", ("train.total_timesteps",)),
    "ppo-total-timesteps-1e30": ("ppo:\n  total_timesteps: " + "1" + "0" * 30 + "\n", ("ppo.total_timesteps",)),
    "duplicate-key": ("seed: 1\nscenario: credit_approval\nseed: 2\n", ("params.yaml:3", "seed", "twice", "line 1")),
    "duplicate-nested-key": (
        "train:\n  total_timesteps: 10\n  ewc_lambda: 1\n  total_timesteps: 20\n",
        ("params.yaml:4", "total_timesteps", "twice", "line 2"),
    ),
}


def _own(tmp_text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(tmp_text.replace("{tmp}", str(path.parent)))

    return write


FILES["python-object-apply"] = (_own(OWN), FILES["python-object-apply"][1])

PROBES = [
    *(IOProbe(f"params-file-{k}", params_file(w, *m), timeout_s=30) for k, (w, m) in FILES.items()),
    IOProbe("params-path-missing", params_path("{tmp}/nowhere.yaml", "not found")),
    IOProbe("params-path-empty", params_path("", "is a folder")),
    IOProbe("params-path-dev-zero", params_path("/dev/zero", "not a regular file"), timeout_s=20),
    IOProbe("params-path-dev-null", params_path("/dev/null", "not a regular file")),
    IOProbe("params-path-proc-self", params_path("/proc/self/environ", "not valid YAML")),
    IOProbe("params-file-bad-for-a-command", params_file("seed: .nan\n", "seed", argv=AUDIT)),
    IOProbe("env-scenarios-dir-a-file", scenarios_dir(file_named("scenarios"), "scenarios")),
    IOProbe("env-scenarios-dir-missing", scenarios_dir(None, "nowhere")),
    IOProbe("env-scenarios-dir-a-fifo", scenarios_dir(None, "fifo")),
    IOProbe("env-storage-ftp", override("RLOPS_STORAGE_ROOT", "ftp://host/x", AUDIT, ("unsupported storage URI",))),
    IOProbe("env-storage-s3-no-bucket", override("RLOPS_STORAGE_ROOT", "s3://", AUDIT, ("no bucket",))),
    IOProbe("env-storage-a-file", override("RLOPS_STORAGE_ROOT", "file:///etc/hostname", AUDIT, ("audit",))),
    IOProbe(
        "env-storage-10k-path",
        override("RLOPS_STORAGE_ROOT", "file:///tmp/" + "d" * 10_000, AUDIT, ("File name too long",), codes=(1,)),
    ),
    IOProbe(
        "env-tracking-garbage",
        override(
            "MLFLOW_TRACKING_URI",
            "garbage://nowhere",
            ["model", "rollback", "--scenario", "credit_approval", "--dry-run"],
            ("garbage://nowhere",),
            codes=(1, 2),
        ),
    ),
    # config validate refuses what every command would refuse, naming the variable
    IOProbe(
        "env-validate-storage-ftp",
        override("RLOPS_STORAGE_ROOT", "ftp://host/x", VALIDATE, ("RLOPS_STORAGE_ROOT", "unsupported storage URI")),
    ),
    IOProbe(
        "env-validate-storage-s3-no-bucket",
        override("RLOPS_STORAGE_ROOT", "s3://", VALIDATE, ("RLOPS_STORAGE_ROOT", "no bucket", "s3://bucket")),
    ),
    IOProbe(
        "env-validate-queue-db-not-a-url",
        override("RLOPS_QUEUE_DB", "not a url", VALIDATE, ("RLOPS_QUEUE_DB", "'not a url'", "sqlite:///")),
    ),
    IOProbe(
        "env-validate-queue-db-unknown-dialect",
        override("RLOPS_QUEUE_DB", "nosuchdb://h/x", VALIDATE, ("RLOPS_QUEUE_DB", "nosuchdb")),
    ),
    IOProbe(
        "env-validate-tracking-nonsense",
        override("MLFLOW_TRACKING_URI", "nonsense://x", VALIDATE, ("MLFLOW_TRACKING_URI", "nonsense://x", "http")),
    ),
    IOProbe(
        "env-queue-db-garbage",
        override(
            "RLOPS_QUEUE_DB",
            "nonsense",
            ["labels", "export", "--scenario", "credit_approval", "--run-key", "20261130T0500", "--dry-run"],
            ("label queue database URL 'nonsense'",),
        ),
    ),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_params_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

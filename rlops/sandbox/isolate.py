"""Validating a pack in a child process, with a wall-clock limit, a CPU-time limit and a memory
limit, so that no pack can hang or exhaust the validating process.

A pack holds Python — reward modules, an oracle — and importing it runs that code. A module that
loops at import, allocates without end or calls ``sys.exit`` must cost a CI job one clear error,
not its runner. :func:`validate_isolated` therefore runs the whole of :func:`rlops.sandbox.pack.load_pack`
plus an oracle probe in a fresh interpreter and only reads back its verdict: the summary of a
valid pack, or the :class:`PackError` of a broken one. The child reports each stage it starts
(``importing reward_v1.py``), so a limit that stops it still names the file it was busy with.

The child's side is :mod:`rlops.sandbox.isolate_child`: only the child imports the pack loader
(and with it torch, a second or more of start-up the validating process never needs).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlops.sandbox.errors import PackError
from rlops.sandbox.precheck import precheck_pack

#: Wall-clock limit of the pack's part of a validation, from the moment the child has started
#: (imported torch): the credit pack needs about 0.3 s. With the start-up of both processes,
#: ``rlops env validate`` answers within 10 s on any pack.
TIMEOUT_S = 4.0
#: Start-up of the child (interpreter and torch), which runs none of the pack's code.
STARTUP_TIMEOUT_S = 30.0
#: Memory the pack may use beyond what the interpreter and torch hold once imported.
MEMORY_BUDGET_BYTES = 2 << 30
#: The largest file the child may write (its log included).
MAX_WRITE_BYTES = 16 << 20

_SRC = Path(__file__).resolve().parents[2]
# -I: no user site-packages, no PYTHON* variables, no current folder on sys.path; the sandbox
# package is put first explicitly so the child runs the same code as the parent. Importing torch
# allocates a few hundred thousand objects that live as long as the child, and the collector's full
# passes over them while they were imported took about 0.2 s of the 1.4 s of ``rlops env validate``
# on 2 cores: collection is off while the child imports, those objects are then frozen out of
# every later pass, and the pack's own code runs with the collector on, as in any process.
_BOOT = (
    "import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "from rlops.sandbox.isolate_child import child_main; gc.freeze(); gc.enable(); "
    "sys.exit(child_main(sys.argv[2:]))"
)


def validate_isolated(
    path: str | Path, timeout_s: float = TIMEOUT_S, memory_bytes: int = MEMORY_BUDGET_BYTES
) -> dict[str, Any]:
    """Load and check the pack at ``path`` in a child process; return its summary (name, sizes,
    reward function versions) or raise the :class:`PackError` that describes what is wrong,
    including running past ``timeout_s`` or over the memory budget."""
    root = Path(path)
    # Most broken packs fail these checks, which run none of the pack's code: no child needed.
    precheck_pack(path)
    with tempfile.TemporaryDirectory(prefix="rlops-validate-") as tmp:
        report, log = Path(tmp) / "report.jsonl", Path(tmp) / "child.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        with open(log, "wb") as log_fh:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT, str(_SRC), str(root), str(report), str(memory_bytes)],
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=log_fh,
                env=env,
                start_new_session=True,
                preexec_fn=_limits(timeout_s),
            )
            try:
                timed_out = _wait(proc, report, timeout_s)
            finally:
                _kill_group(proc)
        return _verdict(_read_report(report), proc.returncode, timed_out, root, timeout_s, memory_bytes, log)


def _wait(proc: subprocess.Popen[bytes], report: Path, timeout_s: float) -> bool:
    """Wait for the child; True when it ran out of time. The pack's time starts when the child
    reports it is ready, so a busy machine slowing the interpreter's start-up is not blamed on
    the pack."""
    start_by = time.monotonic() + STARTUP_TIMEOUT_S
    finish_by: float | None = None
    while proc.poll() is None:
        now = time.monotonic()
        if finish_by is None and report.exists() and report.stat().st_size > 0:
            finish_by = now + timeout_s
        if now > (finish_by or start_by):
            if finish_by is None:
                raise RuntimeError(
                    f"the validating process did not start within {STARTUP_TIMEOUT_S:g} s (is the machine overloaded?)"
                )
            return True
        time.sleep(0.01)
    return False


def _limits(timeout_s: float) -> Callable[[], None]:
    def apply() -> None:
        # CPU time is a backstop for a child whose parent died: the wall clock is the real
        # limit, but two busy threads may spend CPU twice as fast as the wall clock runs. The
        # child's start-up (interpreter, imports) spends CPU before the pack's clock starts; on a
        # slow machine it took most of a 1-s budget's allowance, so it gets its own.
        cpu = int(2 * (timeout_s + STARTUP_TIMEOUT_S)) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_WRITE_BYTES, MAX_WRITE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the child and anything the pack's code started (they share its session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read_report(report: Path) -> list[dict[str, Any]]:
    if not report.exists():
        return []
    out = []
    for line in report.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # the child was stopped mid-line
    return out


def _verdict(
    events: list[dict[str, Any]],
    rc: int | None,
    timed_out: bool,
    root: Path,
    timeout_s: float,
    memory_bytes: int,
    log: Path,
) -> dict[str, Any]:
    stage = next((e["stage"] for e in reversed(events) if "stage" in e), [str(root), "starting"])
    for e in events:
        if "ok" in e:
            summary: dict[str, Any] = e["ok"]
            return summary
        if "error" in e:
            raise PackError(**e["error"])
        if "internal" in e:
            raise RuntimeError(f"internal error while validating {root} ({stage[1]}): {e['internal']}")
    file, what = stage
    if timed_out:
        raise PackError(
            file,
            None,
            "",
            f"{what} did not finish within {timeout_s:g} s and was stopped "
            "(a loop in the pack's code, or work too large to validate)",
        )
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc)
        why = {
            signal.SIGXCPU: "used too much CPU time",
            signal.SIGXFSZ: f"wrote a file over {MAX_WRITE_BYTES} bytes",
            signal.SIGKILL: f"ran out of memory (budget {memory_bytes >> 20} MiB)",
        }
        raise PackError(file, None, "", f"{what} was stopped: it {why.get(sig, f'got signal {sig.name}')}")
    tail = log.read_bytes()[-300:].decode("utf-8", "replace").strip().splitlines()
    hint = f": {tail[-1]}" if tail and stage[1] == "starting" else ""
    raise PackError(file, None, "", f"{what} ended the validating process (exit code {rc}) without a verdict{hint}")


def roles_summary(spec: Any) -> dict[str, Any]:
    """``{"roles": {name: {actions, acts_when}}}`` for a multi-agent scenario; nothing without roles."""
    if not spec.roles:
        return {}
    return {
        "roles": {
            r.name: {
                "actions": list(r.actions),
                "acts_when": r.acts_when if r.acts_when is not None else "otherwise",
                "description": r.description,
            }
            for r in spec.roles
        }
    }

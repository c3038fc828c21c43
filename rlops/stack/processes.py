"""Processes of the stack: start one in a session of its own, tell whether a recorded pid is still
the process the stack started, stop a session. A part is recorded by its pid and its start time
(``/proc/<pid>/stat``), so a pid reused by an unrelated program is never taken for ours; the part's
children (Airflow's task supervisors, uvicorn's workers) share its session, so ``down`` finds those that
left the process group without touching anything it did not start. (The environment cannot mark
them: Airflow retitles its processes with setproctitle, which overwrites ``/proc/<pid>/environ``.)"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Started:
    """A process the stack started: its pid (also its session and group id) and start time."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says of a process."""

    state: str
    """One letter: R running, S sleeping, Z zombie, …"""
    session: int
    start_ticks: int
    """Start time after boot, in clock ticks: with the pid, it names one process for good."""
    cpu_s: float
    """User plus system CPU seconds used so far."""


_TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> ProcStat | None:
    """The state of ``pid``, or None when it does not run."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return ProcStat(fields[0], int(fields[3]), int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICKS)


def start(argv: Sequence[str], env: Mapping[str, str], log_file: Path, cwd: Path) -> Started:
    """Start ``argv`` detached from this process (its own session, output appended to ``log_file``)."""
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    st = proc_stat(proc.pid)
    return Started(proc.pid, st.start_ticks if st else 0)


def is_ours(p: Started) -> bool:
    """Whether the recorded process still runs (same pid, same start time, not a zombie)."""
    st = proc_stat(p.pid) if p.pid > 0 else None
    return st is not None and st.start_ticks == p.start_ticks and st.state != "Z"


def session_members(sessions: Iterable[int]) -> list[int]:
    """Every live process in one of ``sessions`` (the parts' children included)."""
    wanted = {s for s in sessions if s > 0}
    found = []
    for d in Path("/proc").iterdir() if wanted else ():
        if d.name.isdigit() and int(d.name) != os.getpid():
            st = proc_stat(int(d.name))
            if st is not None and st.session in wanted and st.state != "Z":
                found.append(int(d.name))
    return found


def stop(p: Started, grace_s: float = 20.0) -> None:
    """SIGTERM the part's process group, SIGKILL its whole session after ``grace_s`` if anything is left."""
    if is_ours(p):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and is_ours(p):
            time.sleep(0.2)
    st = proc_stat(p.pid)
    if st is not None and st.start_ticks != p.start_ticks and st.session == p.pid:
        return  # the pid now leads another program's session: nothing of ours is left in it
    for pid in session_members([p.pid]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def port_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound now (a listener of another program makes it False)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listener_cwd(port: int) -> Path | None:
    """The working folder of the process of this user that listens on ``port`` (None: none found, or
    not ours to inspect). Every part of a stack runs in the stack's ``AIRFLOW_HOME``, so this names
    the stack that holds a port."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            with contextlib.suppress(psutil.Error, OSError):
                return Path(psutil.Process(c.pid).cwd())
    return None


def answers(url: str, timeout_s: float = 10.0) -> bool:
    """Whether ``GET url`` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - the stack's own URL
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False

"""Stack probes: ``rlops stack up|status|down`` over a stack folder of the probe's own, in states an
operator meets — nothing up, a state file from a crashed or earlier stack (pids now dead or owned by
another program), damaged state and secrets files, the ports taken by another program. Each answers
with one line and the right exit code; ``down`` never signals a process the stack did not start;
``up`` refuses taken ports before it starts or creates anything. No server is ever started: the
process launcher and the database migration are replaced by tripwires. One test per probe."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, run_probe


class Tripwire(BaseException):
    """Raised where the stack would start a server: no ``except Exception`` hides it."""


@pytest.fixture
def stack_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A params file whose stack lives under tmp on four ports held by this test (a listener of
    "another program"), the registry key from the environment; launching or migrating trips."""
    from rlops.common.config import REPO_ROOT
    from rlops.registry.alias_records import KEY_ENV
    from rlops.stack import airflow_setup, processes

    listeners = []
    for _ in range(4):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        listeners.append(s)
    ports = [s.getsockname()[1] for s in listeners]
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["stack"].update(
        home=str(tmp_path / "probes" / "stack-home"),
        **dict(zip(("airflow_port", "mlflow_port", "console_port", "webhook_port"), ports, strict=True)),
    )
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("RLOPS_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    monkeypatch.setenv(KEY_ENV, "probe-registry-key")

    def trip(*args: object, **kwargs: object) -> None:
        raise Tripwire("the stack tried to start a server")

    monkeypatch.setattr(processes, "start", trip)
    monkeypatch.setattr(airflow_setup, "migrate", trip)
    try:
        yield ports
    finally:
        for s in listeners:
            s.close()


def home_of(tmp: Path) -> Path:
    return tmp.parent / "stack-home"


def state(parts: object) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        home = home_of(tmp)
        home.mkdir(parents=True, exist_ok=True)
        (home / "state.json").write_text(json.dumps({"database": "sqlite:///x.db", "parts": parts}))

    return write


def raw(name: str, content: str | None) -> Callable[[Path], None]:
    """``name`` under the stack folder: the text, or a folder when ``content`` is None."""

    def write(tmp: Path) -> None:
        home = home_of(tmp)
        home.mkdir(parents=True, exist_ok=True)
        if content is None:
            (home / name).mkdir()
        else:
            (home / name).write_text(content)

    return write


def down_ok(setup: Callable[[Path], None] | None, stopped: list[str] | None = None) -> Callable[[Path], Verdict]:
    """``rlops stack down --json`` exits 0 naming what it stopped (``stopped``), one JSON document."""

    def run(tmp: Path) -> Verdict:
        if setup is not None:
            setup(tmp)
        rc, out, err = cli(["stack", "down", "--json"])
        if "Traceback" in out + err or "internal error" in err:
            return "traceback", err.strip()[-300:]
        if rc != 0:
            return "accepted", f"exit {rc}: {err.strip()[-300:]}"
        got = json.loads(out)["stopped"]
        return None if stopped is None or got == stopped else ("accepted", f"stopped {got}")

    return run


def bystander(make_record: Callable[[int, int], dict[str, int]]) -> Callable[[Path], Verdict]:
    """A live process the stack did not start, named by a stale state file (its pid reused, or a
    record with another start time): ``down`` leaves it running."""

    def run(tmp: Path) -> Verdict:
        from rlops.stack.processes import proc_stat

        proc = subprocess.Popen(["sleep", "60"], start_new_session=False)
        try:
            st = proc_stat(proc.pid)
            assert st is not None
            state({"airflow-scheduler": make_record(proc.pid, st.start_ticks)})(tmp)
            verdict = down_ok(None)(tmp)
            if verdict:
                return verdict
            if proc.poll() is not None:
                return "security", f"down killed a process it did not start (signal {-proc.returncode})"
            return None
        finally:
            proc.kill()
            proc.wait()

    return run


def own_process(tmp: Path) -> Verdict:
    """A state file naming this very process (with another start time): down must not kill it."""
    state({"airflow-api-server": {"pid": os.getpid(), "start_ticks": 1}})(tmp)
    return down_ok(None, stopped=[])(tmp)  # reaching the verdict at all means it did not


def dead_pid(tmp: Path) -> Verdict:
    """Parts whose processes died long ago (a crash, a reboot): nothing to stop, the state emptied."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    state({"mlflow": {"pid": proc.pid, "start_ticks": 12345}, "console": {"pid": 999_999_999, "start_ticks": 1}})(tmp)
    verdict = down_ok(None, stopped=[])(tmp)
    if verdict:
        return verdict
    left = json.loads((home_of(tmp) / "state.json").read_text())["parts"]
    return None if left == {} else ("lost", f"the state still names {list(left)}")


def up_refuses_taken_ports(tmp: Path) -> Verdict:
    """Every port of the stack held by another program: one line naming them, exit 2, nothing started."""
    return expect_cli_error(["stack", "up"], 2, mentions=("already in use", "stack.airflow_port"))


def status_error(setup: Callable[[Path], None] | None, *mentions: str) -> Callable[[Path], Verdict]:
    def run(tmp: Path) -> Verdict:
        if setup is not None:
            setup(tmp)
        return expect_cli_error(["stack", "status"], 2, mentions)

    return run


def down_error(setup: Callable[[Path], None], *mentions: str) -> Callable[[Path], Verdict]:
    def run(tmp: Path) -> Verdict:
        setup(tmp)
        return expect_cli_error(["stack", "down"], 2, mentions)

    return run


def home_is_a_file(tmp: Path) -> Verdict:
    home = home_of(tmp)
    home.parent.mkdir(parents=True, exist_ok=True)
    home.write_text("not a folder")
    return expect_cli_error(["stack", "up"], 2, mentions=(str(home),))


PROBES = [
    IOProbe("stack-down-nothing-up", down_ok(None, stopped=[])),
    IOProbe("stack-down-empty-state", down_ok(state({}), stopped=[])),
    IOProbe("stack-down-twice", lambda tmp: down_ok(None, [])(tmp) or down_ok(None, [])(tmp)),
    IOProbe("stack-down-dead-pids", dead_pid),
    IOProbe("stack-down-pid-reused", bystander(lambda pid, ticks: {"pid": pid, "start_ticks": ticks + 1})),
    IOProbe("stack-down-pid-no-ticks", bystander(lambda pid, ticks: {"pid": pid})),
    IOProbe("stack-down-own-pid", own_process),
    IOProbe("stack-down-pid-zero", down_ok(state({"mlflow": {"pid": 0, "start_ticks": 0}}), stopped=[])),
    IOProbe("stack-down-pid-negative", down_ok(state({"mlflow": {"pid": -1, "start_ticks": 0}}), stopped=[])),
    IOProbe("stack-down-pid-text", down_error(state({"mlflow": {"pid": "abc", "start_ticks": 1}}), "state.json")),
    IOProbe("stack-down-parts-a-list", down_ok(state(["mlflow"]), stopped=[])),
    IOProbe("stack-down-part-not-a-record", down_ok(state({"mlflow": 42}), stopped=[])),
    IOProbe("stack-down-state-not-json", down_error(raw("state.json", "{half"), "state.json", "not readable JSON")),
    IOProbe("stack-down-state-a-list", down_error(raw("state.json", "[1, 2]"), "state.json", "expected a JSON object")),
    IOProbe("stack-down-state-a-folder", down_error(raw("state.json", None), "state.json")),
    IOProbe("stack-status-nothing-up", status_error(None, "no stack", "rlops stack up")),
    IOProbe("stack-status-secrets-not-json", status_error(raw("secrets.json", "{"), "secrets.json")),
    IOProbe("stack-status-secrets-a-folder", status_error(raw("secrets.json", None), "secrets.json")),
    IOProbe("stack-up-ports-taken", up_refuses_taken_ports),
    IOProbe("stack-up-home-is-a-file", home_is_a_file),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_stack_probe(probe: IOProbe, stack_env: list[int], tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path / "probes"))

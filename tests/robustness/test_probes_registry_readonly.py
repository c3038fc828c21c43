"""A registry that refuses writes (a tracking database on a read-only mount, a database user without
write rights): ``rlops model promote`` answers with its own short message and leaves the aliases as
they were. MLflow's own logger reports the refused write with SQLAlchemy tracebacks of a hundred
lines and more; on the command line those are debug output (shown with ``rlops --debug``), so the
person reads only rlops' message. One test per probe."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .io_harness import IOProbe, Verdict, check, cli, run_probe

S = "credit_approval"


@contextmanager
def read_only_database() -> Iterator[None]:
    """Every SQLite connection this process checks out refuses writes (``PRAGMA query_only``), as a
    database file on a read-only mount does (file modes alone do not stop a root user)."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    def refuse_writes(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if type(dbapi_connection).__module__.startswith("sqlite3"):
            dbapi_connection.execute("PRAGMA query_only = ON")

    event.listen(Pool, "checkout", refuse_writes)
    try:
        yield
    finally:
        event.remove(Pool, "checkout", refuse_writes)


def _aliases() -> dict[str, str]:
    from rlops.pipeline_steps.infra.context import StepContext
    from tests.policy_kit import NAME

    client = StepContext.create(S, "20260105T1000").tracker.client
    return dict(client.get_registered_model(NAME).aliases)


def _promote_read_only(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.infra.context import StepContext
    from tests.policy_kit import approve_all_policy, credit_pack, register

    ctx = StepContext.create(S, "20260105T1000")
    pack = credit_pack()
    for _ in range(2):
        register(ctx, pack, approve_all_policy(pack))
    before = _aliases()
    with read_only_database():
        rc, out, err = cli(["model", "promote", "--candidate", "2", "--scenario", S, "--episodes", "50"])
    if _aliases() != before:
        return "lost", f"aliases changed on a refused write: {before} → {_aliases()}"
    if rc == 0:
        return "accepted", f"exit 0 although the registry refused the write: {out[-300:]}"
    if "Traceback" in err:
        shown = [ln for ln in err.splitlines() if "ERROR" in ln][:1]
        return "traceback", f"{err.count(chr(10))} lines on stderr, e.g. {shown}"
    return None if "could not complete" in out + err else ("accepted", f"no message: {out[-300:]} {err[-300:]}")


PROBES = [IOProbe("promote_read_only_registry", _promote_read_only, 240)]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_read_only_registry_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

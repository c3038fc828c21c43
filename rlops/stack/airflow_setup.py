"""What the stack creates once in Airflow and MLflow: the metadata database and its schema, the
pools the DAGs name, the DAGs unpaused as params say, the MLflow webhook that calls the receiver."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlops.common.airflow_api import AirflowApi
from rlops.common.errors import InfrastructureError, UserError
from rlops.common.params_model import Params
from rlops.stack.home import StackHome

MIGRATED_STAMP = "migrated"
CLI_CONFIG_HEADER = (
    "# Written by `rlops stack up` from the settings its Airflow processes run with, so that the\n"
    "# `airflow` command line with AIRFLOW_HOME set to this folder talks to the stack's own database.\n"
    "# The processes take the same values from their environment; edit params.yaml (block stack), not this.\n"
)


def maintenance_connection(url: str, timeout_s: int = 5) -> Any:
    """A connection to the ``postgres`` maintenance database of the server ``url`` names."""
    import psycopg2

    u = urllib.parse.urlsplit(url.replace("postgresql+psycopg2://", "postgresql://"))
    return psycopg2.connect(
        host=u.hostname, port=u.port or 5432, user=u.username, password=u.password, dbname="postgres",
        connect_timeout=timeout_s,
    )  # fmt: skip


def _postgres_answers(url: str) -> bool:
    try:
        maintenance_connection(url, timeout_s=3).close()
    except Exception:  # noqa: BLE001 - any failure means "no PostgreSQL for us here"
        return False
    return True


def database_url(params: Params, stack: StackHome) -> str:
    """Airflow's metadata DB: a database of this stack's own on PostgreSQL (created when missing), or
    SQLite under AIRFLOW_HOME (``stack.database``; ``auto`` takes PostgreSQL when it answers)."""
    choice, pg = params.stack.database, params.stack.postgres_url
    if choice == "sqlite" or (choice == "auto" and not _postgres_answers(pg)):
        return f"sqlite:///{stack.airflow_home / 'airflow.db'}"
    if not _postgres_answers(pg):
        raise UserError(
            f"stack.database is postgresql but {_redacted(pg)} does not answer: start PostgreSQL, "
            "or set stack.database to auto or sqlite in params.yaml"
        )
    # one database per stack home: two stacks (a test's and yours) never share Airflow's tables
    name = "rlops_airflow_" + hashlib.sha256(str(stack.root).encode()).hexdigest()[:10]
    u = urllib.parse.urlsplit(pg.replace("postgresql+psycopg2://", "postgresql://"))
    conn = maintenance_connection(pg)
    conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return urllib.parse.urlunsplit(("postgresql+psycopg2", u.netloc, f"/{name}", "", ""))


def _redacted(url: str) -> str:
    u = urllib.parse.urlsplit(url)
    return url.replace(f":{u.password}@", ":***@") if u.password else url


def write_cli_config(stack: StackHome, env: Mapping[str, str]) -> Path:
    """``airflow.cfg`` under the stack's ``AIRFLOW_HOME`` holding the ``AIRFLOW__SECTION__KEY`` settings of
    ``env`` (mode 0600: it holds the database URL and Fernet key). Without it an operator's ``airflow``
    command finds no configuration there, writes Airflow's default one and talks to an empty SQLite
    database; the stack's own processes would read the same file, so it is rewritten at every ``up``."""
    sections: dict[str, dict[str, str]] = {}
    for name, value in sorted(env.items()):
        parts = name.split("__")
        if len(parts) == 3 and parts[0] == "AIRFLOW" and parts[1] and parts[2]:
            # configparser interpolates '%': a password holding one must reach Airflow as written
            sections.setdefault(parts[1].lower(), {})[parts[2].lower()] = value.replace("%", "%%")
    lines = [CLI_CONFIG_HEADER]
    for section, options in sections.items():
        lines.append(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in options.items()))
    path = stack.airflow_home / "airflow.cfg"
    tmp = path.with_suffix(".cfg.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)
    return path


def migrate(stack: StackHome, env: Mapping[str, str], database: str, airflow_version: str) -> bool:
    """``airflow db migrate`` once per database and Airflow version (it costs tens of seconds even
    when there is nothing to do); True when it ran."""
    stamp = stack.root / MIGRATED_STAMP
    key = f"{airflow_version} {_redacted(database)}"
    if stamp.exists() and stamp.read_text().strip() == key:
        return False
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=dict(env),
        cwd=stack.airflow_home,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        log = stack.logs / "airflow-db-migrate.log"
        log.write_text(out.stdout + out.stderr)
        raise InfrastructureError(
            f"`airflow db migrate` on {_redacted(database)} exited {out.returncode}; its output is in {log}: "
            + (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        )
    stamp.write_text(key + "\n")
    return True


def ensure_pools(api: AirflowApi, pools: Mapping[str, int]) -> list[str]:
    """Create the pools that do not exist yet (an existing pool keeps the slots an operator gave it);
    the names created."""
    created = []
    for name, slots in pools.items():
        if not api.pool_exists(name):
            api.request(
                "POST",
                "/api/v2/pools",
                {"name": name, "slots": int(slots), "description": "rlops: created by `rlops stack up`"},
            )
            created.append(name)
    return created


def wanted_unpaused(params: Params, dag_ids: Iterable[str], packs: Iterable[str]) -> list[str]:
    """The DAG ids to unpause: ``dags.unpaused`` patterns, or by default every DAG of the params'
    ``scenario`` pack and ``promote`` of every pack (two cores are not buried under every pack's retrains)."""
    patterns = params.dags.unpaused
    if patterns is None:
        patterns = [f"*__{params.scenario}", *(f"promote__{p}" for p in packs)]
    return sorted(d for d in dag_ids if any(fnmatch.fnmatchcase(d, p) for p in patterns))


def dag_states(api: AirflowApi) -> dict[str, bool]:
    """``{dag_id: is_paused}`` of every DAG Airflow knows."""
    out: dict[str, bool] = {}
    offset = 0
    while True:
        page = api.request("GET", f"/api/v2/dags?limit=100&offset={offset}") or {}
        dags = page.get("dags", [])
        out.update({d["dag_id"]: bool(d.get("is_paused")) for d in dags})
        offset += len(dags)
        if not dags or offset >= int(page.get("total_entries", 0)):
            return out


def import_errors(api: AirflowApi) -> list[dict[str, Any]]:
    return list((api.request("GET", "/api/v2/importErrors?limit=100") or {}).get("import_errors", []))


def wait_for_dags(api: AirflowApi, expected: set[str], timeout_s: float) -> dict[str, bool]:
    """Until the dag-processor has parsed every DAG of ``expected`` (or ``timeout_s``); the states known.
    An import error does not end the wait: the other packs' DAGs still come (one broken pack must not
    take them down), and ``status`` reports it."""
    deadline = time.monotonic() + timeout_s
    states = dag_states(api)
    while not expected <= set(states) and time.monotonic() < deadline:
        time.sleep(2)
        states = dag_states(api)
    return states


def unpause(api: AirflowApi, dag_ids: Iterable[str], states: Mapping[str, bool]) -> list[str]:
    """Unpause the paused ones among ``dag_ids``; those it unpaused."""
    done = []
    for dag_id in dag_ids:
        if states.get(dag_id, False):
            api.request("PATCH", f"/api/v2/dags/{urllib.parse.quote(dag_id, safe='')}", {"is_paused": False})
            done.append(dag_id)
    return done


@dataclass(frozen=True)
class AirflowProblems:
    """What keeps an Airflow's DAGs from running as params want: where the operator looks
    (``rlops stack status``, the console's front page)."""

    missing_pools: tuple[str, ...] = ()
    paused: tuple[str, ...] = ()
    """DAGs ``dags.unpaused`` wants running that are paused."""
    import_errors: tuple[str, ...] = ()
    unreachable: str | None = None

    def lines(self) -> list[str]:
        out = [f"the Airflow API did not answer: {self.unreachable}"] if self.unreachable else []
        out += [f"pool {p!r} does not exist: tasks in it wait for ever (`rlops stack up` creates it)"
                for p in self.missing_pools]  # fmt: skip
        out += [f"DAG {d} is paused although params (dags.unpaused) want it running" for d in self.paused]
        return out + [f"import error: {e}" for e in self.import_errors]


def airflow_problems(api: AirflowApi, params: Params, packs: Iterable[str]) -> AirflowProblems:
    """Missing pools, DAGs left paused, import errors — asked of the API server ``api``."""
    try:
        states = dag_states(api)
        return AirflowProblems(
            missing_pools=tuple(p for p in params.stack.pools if not api.pool_exists(p)),
            paused=tuple(d for d in wanted_unpaused(params, states, packs) if states.get(d)),
            import_errors=tuple(
                f"{e.get('filename')}: {(str(e.get('stack_trace') or '').strip().splitlines() or [''])[-1]}"
                for e in import_errors(api)
            ),
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return AirflowProblems(unreachable=str(exc))

"""A throwaway Airflow 3 cluster on this machine: CeleryExecutor, PostgreSQL metadata DB, Redis
broker — the distributed deployment of ``docker/`` without containers.

:class:`AirflowCluster` owns everything it creates and removes it in :meth:`AirflowCluster.close`:

* a fresh Postgres database ``rlops_af_<random>`` (metadata DB and Celery result backend);
* a Redis database number claimed with a lock key (the Celery broker), flushed at both ends;
* ``AIRFLOW_HOME`` (the caller's folder): config via environment only, task logs, process logs;
* the processes — scheduler, dag-processor, api-server, and one Celery worker per queue — each
  in its own session, so a stop reaches the whole process group (Celery's pool children, task
  supervisors, the dag-processor's parsers). Anything still alive afterwards that carries this
  cluster's ``AIRFLOW_HOME`` in its environment is killed by pid.

Workers get a distinct Celery node name (``--celery-hostname``) and, through
:func:`worker_hostname` as ``[core] hostname_callable``, the same name in the ``hostname``
column of the task instances they run — both workers share one machine, so the real hostname
could not tell them apart.

Imports only the standard library at module level: the workers import this module (for the
hostname callable) and must stay light.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
WORKER_NAME_VAR = "RLOPS_CELERY_HOSTNAME"
"""Environment variable that carries a worker's Celery node name to :func:`worker_hostname`."""
_REDIS_LOCK = "rlops:distributed-test:lock"
_ENV_PREFIXES = ("AIRFLOW", "RLOPS_", "MLFLOW_", "AWS_", "PYTHONPATH")
_FAILED = {"failed", "upstream_failed"}


def worker_hostname() -> str:
    """``[core] hostname_callable`` of the test's workers: their Celery node name."""
    return os.environ.get(WORKER_NAME_VAR) or socket.getfqdn()


class ClusterError(RuntimeError):
    """The cluster did not come up, or a run did not finish in time."""


# --------------------------------------------------------------------------- services
def services_unavailable() -> str | None:
    """Why the local Postgres / Redis cannot host a cluster, or None when both answer."""
    try:
        import psycopg2
        import redis
    except ImportError as exc:
        return f"psycopg2 and redis are needed for the distributed test: {exc}"
    try:
        psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=3).close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not here"
        return f"PostgreSQL at {PG_HOST}:{PG_PORT} (user {PG_USER}, trust auth) is unreachable: {exc}"
    try:
        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001
        return f"Redis at {REDIS_HOST}:{REDIS_PORT} is unreachable: {exc}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_admin(sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5)
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _claim_redis_db() -> int:
    """A Redis database number no one else uses right now (empty, then locked with SET NX)."""
    import redis

    for n in secrets.SystemRandom().sample(range(1, 16), 15):
        r = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=n, socket_timeout=5)
        if r.dbsize() == 0 and r.set(_REDIS_LOCK, str(os.getpid()), nx=True, ex=3600):
            return n
    raise ClusterError(f"no free database on Redis {REDIS_HOST}:{REDIS_PORT} (1..15 all hold keys)")


def _flush_redis(db: int) -> None:
    import redis

    redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db, socket_timeout=5).flushdb()


# --------------------------------------------------------------------------- the cluster
@dataclass
class AirflowCluster:
    """Airflow with the CeleryExecutor on local Postgres + Redis; see the module docstring.

    ``project_env`` is added to every process's environment (the rlops settings); the caller's
    own ``AIRFLOW*``, ``RLOPS_*``, ``MLFLOW_*`` and ``AWS_*`` variables are not inherited.
    """

    home: Path
    repo: Path
    project_env: dict[str, str] = field(default_factory=dict)
    db_name: str = field(default_factory=lambda: f"rlops_af_{secrets.token_hex(4)}")
    redis_db: int | None = None
    api_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    _token: str | None = None
    _db_created: bool = False

    # ---------------------------------------------------------------- environment
    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def proc_logs(self) -> Path:
        return self.home / "proc-logs"

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIXES)}
        pg = f"postgres@{PG_HOST}:{PG_PORT}/{self.db_name}"
        secret = self._secret("jwt", 32)
        cfg = {
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{pg}",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{self.redis_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://{pg}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.repo / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(self._secret("fernet", 32)).decode(),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            # Only runs this test triggers: an unpaused DAG must not also get its cron run.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
            # Workers reach the metadata DB only through the API server's execution API, with
            # per-task JWTs the scheduler signs: one shared secret.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secret.hex(),  # 64 characters: HS512 wants >= 64
            "AIRFLOW__API__SECRET_KEY": self._secret("api").hex(),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": f"{self.api_url}/",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "PYTHONPATH": str(self.repo),
        }
        return {**base, **cfg, **self.project_env, **extra}

    def _secret(self, purpose: str, n: int = 24) -> bytes:
        # Derived from the cluster's password so every process sees the same value.
        import hashlib

        return hashlib.sha256(f"{purpose}:{self._password}".encode()).digest()[:n]

    # ---------------------------------------------------------------- lifecycle
    def prepare(self) -> None:
        """Database, broker, passwords file, schema migration."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.proc_logs.mkdir(exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({"admin": self._password}))
        self.redis_db = _claim_redis_db()
        _flush_redis(self.redis_db)
        _pg_admin(f'CREATE DATABASE "{self.db_name}"')
        self._db_created = True
        self.airflow("db", "migrate", timeout=600)

    def airflow(self, *args: str, timeout: float = 300) -> str:
        """Run one ``airflow`` CLI command in the cluster's environment; its output."""
        out = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env(),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise ClusterError(
                f"`airflow {' '.join(args)}` exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
            )
        return out.stdout

    def start(self, name: str, *args: str, **extra_env: str) -> None:
        """Start ``airflow <args>`` as its own process group, output to ``proc-logs/<name>.log``."""
        log = open(self.proc_logs / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        try:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", *args],
                env=self.env(**extra_env),
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()

    def start_worker(self, queue: str, name: str = "") -> str:
        """A Celery worker serving ``queue`` as node ``<queue>-worker<name>@<host>`` (its log
        ``worker-<queue><name>``); the node name."""
        node = f"{queue}-worker{name}@{socket.gethostname()}"
        self.start(
            f"worker-{queue}{name}",
            "celery",
            "worker",
            "--queues",
            queue,
            "--celery-hostname",
            node,
            "--concurrency",
            "1",
            "--skip-serve-logs",
            "--without-gossip",
            "--without-mingle",
            **{
                WORKER_NAME_VAR: node,
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{Path(__file__).stem}.worker_hostname",
                "PYTHONPATH": f"{self.repo}{os.pathsep}{Path(__file__).resolve().parent}",
            },
        )
        return node

    def start_services(self) -> None:
        self.start("api-server", "api-server", "--port", str(self.api_port), "--host", "127.0.0.1", "--workers", "1")
        self.start("scheduler", "scheduler", "--skip-serve-logs")
        self.start("dag-processor", "dag-processor")

    def check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise ClusterError(f"processes exited early: {dead}\n{self.process_logs(tail=4000)}")

    def close(self) -> list[str]:
        """Stop every process (TERM, then KILL), flush the broker DB, drop the database.
        Returns the pids of stray processes that had to be killed after the groups were gone."""
        for p in self.procs.values():
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        for p in self.procs.values():
            _signal_group(p, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        strays = _kill_strays(f"AIRFLOW_HOME={self.home}")
        if self.redis_db is not None:
            _flush_redis(self.redis_db)
        if self._db_created:
            _pg_admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            self._db_created = False
        return strays

    # ---------------------------------------------------------------- REST API
    def api(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        """One call to the public REST API (``/api/v2/...``) with a simple-auth-manager JWT."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._login()}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.api_url}{path}", data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def _login(self) -> str:
        if self._token is None:
            out = self.api("POST", "/auth/token", {"username": "admin", "password": self._password}, auth=False)
            self._token = out["access_token"]
        return self._token

    def wait_for_api(self, timeout: float = 240) -> None:
        def ready() -> bool:
            try:
                return self.api("GET", "/api/v2/monitor/health", auth=False) is not None
            except (urllib.error.URLError, OSError):
                return False

        self._wait(ready, timeout, "the API server to answer")

    def wait_for_dag(self, dag_id: str, timeout: float = 240) -> None:
        """Until the dag-processor has parsed ``dag_id``; fail fast on an import error."""

        def parsed() -> bool:
            errors = self.api("GET", "/api/v2/importErrors").get("import_errors", [])
            if errors:
                raise ClusterError(
                    "DAG import errors:\n" + "\n".join(f"{e.get('filename')}: {e.get('stack_trace')}" for e in errors)
                )
            try:
                return self.api("GET", f"/api/v2/dags/{dag_id}")["dag_id"] == dag_id
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return False
                raise

        self._wait(parsed, timeout, f"DAG {dag_id} to be parsed")

    def trigger(self, dag_id: str, conf: dict[str, Any], logical_date: str | None = None) -> str:
        """Unpause ``dag_id`` and create one manual run with ``conf``; the run id."""
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": logical_date, "conf": conf})
        return str(run["dag_run_id"])

    def mapped_instances(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """The mapped instances of ``task_id`` in the run, by map index."""
        rid = urllib.request.quote(run_id, safe="")
        out = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances/{task_id}/listMapped")
        return sorted(out["task_instances"], key=lambda ti: int(ti["map_index"]))

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        rid = urllib.request.quote(run_id, safe="")
        out = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances")
        return {ti["task_id"]: ti for ti in out["task_instances"]}

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        rid = urllib.request.quote(run_id, safe="")
        out = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances/{task_id}/xcomEntries/return_value?deserialize=true",
        )
        value = out["value"]
        return json.loads(value) if isinstance(value, str) else value

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Until the run ends (or a task fails for good, which ends the wait early); its state.
        A task that is up for retry is waited for: retries are part of the DAGs' contract."""
        rid = urllib.request.quote(run_id, safe="")
        state: dict[str, str] = {}

        def ended() -> bool:
            state["run"] = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}")["state"]
            if state["run"] in ("success", "failed"):
                return True
            tis = self.task_instances(dag_id, run_id)
            bad = {t: ti["state"] for t, ti in tis.items() if ti["state"] in _FAILED}
            if bad:
                state["run"] = f"task(s) {bad}"
                return True
            return False

        self._wait(ended, timeout, f"run {run_id} of {dag_id} to end")
        return state["run"]

    def _wait(self, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if done():
                return
            time.sleep(2)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.process_logs(tail=3000)}")

    # ---------------------------------------------------------------- logs
    def tasks_received(self, name: str) -> set[str]:
        """Task ids a process (``worker-<queue>``) logged as Celery workloads it executed."""
        text = (self.proc_logs / f"{name}.log").read_text(errors="replace")
        return {
            line.split("task_id='", 1)[1].split("'", 1)[0]
            for line in text.splitlines()
            if "Executing workload in Celery" in line and "task_id='" in line
        }

    def task_logs(self, dag_id: str, tail: int = 6000) -> str:
        files = sorted((self.home / "logs").glob(f"dag_id={dag_id}/**/*.log"))
        return "\n".join(f"===== {f.relative_to(self.home)}\n{f.read_text(errors='replace')[-tail:]}" for f in files)

    def process_logs(self, tail: int = 3000) -> str:
        files = sorted(self.proc_logs.glob("*.log")) if self.proc_logs.is_dir() else []
        return "\n".join(f"===== {f.name}\n{f.read_text(errors='replace')[-tail:]}" for f in files)


# --------------------------------------------------------------------------- process groups
def _signal_group(p: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(p.pid, sig)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass


def _kill_strays(marker: str) -> list[str]:
    """Kill (by pid) processes whose environment holds ``marker`` — children that left their
    group. Only processes this cluster started carry its unique ``AIRFLOW_HOME``."""
    needle = b"\0" + marker.encode() + b"\0"
    found: list[int] = []
    if not Path("/proc").is_dir():  # not Linux: the process groups are all there is
        return []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in b"\0" + (d / "environ").read_bytes() + b"\0":
                found.append(int(d.name))
        except OSError:
            continue
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return [str(p) for p in found]

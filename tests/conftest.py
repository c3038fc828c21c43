"""Shared pytest setup: repo root on ``sys.path``, markers, and fixtures for S3, MLflow and storage.

Fixtures:

* ``moto_s3`` — endpoint URL of a moto S3 server (real HTTP on 127.0.0.1, free port) with fake
  AWS credentials in the environment; the server's state is wiped after each test.
* ``moto_bucket`` — ``s3://rlops-test`` created on that server.
* ``tmp_tracking`` — an MLflow tracking URI ``sqlite:///<tmp>/mlflow.db`` (a copy of a
  pre-migrated database, so each test does not pay for MLflow's schema migrations), with
  ``MLFLOW_TRACKING_URI`` and ``RLOPS_ARTIFACT_ROOT`` set.
* ``tmp_storage_root`` — a ``file://`` storage root under the test's tmp folder, also set as
  ``RLOPS_STORAGE_ROOT``.
* ``steps_load_pack`` — every step context loads the requesting module's already-loaded ``pack``
  (validated once per module, not once per step), on one torch thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# Airflow reads its configuration once, at first import, so its home is fixed here, before any
# test module imports it: a throwaway SQLite metadata DB, this repository's DAG folder, no
# example DAGs. (The distributed test starts its own processes with their own environment.)
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="rlops-airflow-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
os.environ.setdefault("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "120")
# The session's own cache (the pack liveness verdicts): the user's never decides a test.
os.environ["RLOPS_CACHE_DIR"] = str(_AIRFLOW_HOME / "rlops-cache")


def pytest_configure(config: pytest.Config) -> None:
    # Also listed in pyproject.toml; registering here keeps the markers known when pytest is
    # run with another rootdir or config file.
    config.addinivalue_line("markers", "slow: long-running behaviour tests (run with -m slow)")
    config.addinivalue_line("markers", "gpu: needs CUDA (skipped when no CUDA device is present)")
    config.addinivalue_line(
        "markers", "distributed: starts Airflow with the CeleryExecutor on local Postgres and Redis"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    try:
        import torch

        has_cuda = bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch means no GPU either
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="no CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# --------------------------------------------------------------------------- S3 (moto server)
@pytest.fixture(scope="session")
def _moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def moto_s3(_moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """Endpoint URL of a live moto S3 server, with fake credentials in the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # Never pick up a developer's real profile or credentials file.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RLOPS_S3_ENDPOINT_URL", _moto_server)
    yield _moto_server
    req = urllib.request.Request(f"{_moto_server}/moto-api/reset", method="POST", data=b"")
    urllib.request.urlopen(req, timeout=10).close()


@pytest.fixture
def moto_bucket(moto_s3: str) -> str:
    """``s3://rlops-test``, created on the moto server."""
    import boto3

    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="rlops-test")
    return "s3://rlops-test"


# --------------------------------------------------------------------------- MLflow
@pytest.fixture(scope="session")
def _mlflow_template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()  # runs the migrations
    return db


@pytest.fixture
def tmp_tracking(_mlflow_template_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh MLflow tracking URI ``sqlite:///<tmp>/mlflow.db`` with its artifact root in tmp."""
    folder = tmp_path / "mlflow"
    folder.mkdir()
    shutil.copyfile(_mlflow_template_db, folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    import mlflow

    # a URI an earlier test (or an exporter it ran) set in-process would win over the environment;
    # clearing it also clears MLFLOW_TRACKING_URI, so it comes before the environment is set
    mlflow.set_tracking_uri(None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RLOPS_ARTIFACT_ROOT", str(folder / "artifacts"))
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    return uri


# --------------------------------------------------------------------------- storage
@pytest.fixture
def tmp_storage_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``file://`` storage root under the test's tmp folder (also ``RLOPS_STORAGE_ROOT``)."""
    root = f"file://{tmp_path / 'storage'}"
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", root)
    return root


@pytest.fixture
def steps_load_pack(pack: object, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from rlops.pipeline_steps.infra.context import StepContext

    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: pack)
    torch.set_num_threads(1)


# --- End-to-end fixtures: an Airflow metadata DB (SQLite, migrated once), and an rlops project home
# with tiny budgets so whole DAG runs fit in a test.

# Budgets small enough for 2 CPU cores, large enough that the steps do real work.
TINY: dict[str, Any] = {
    "capture": {"episodes": 800},
    "drift": {"baseline_episodes": 800},
    "reward_model": {"pairs": 800, "epochs": 8},
    "train": {"num_envs": 512, "eval_episodes": 400, "checkpoint_every": 1000},
    "evaluate": {"episodes": 1500, "bootstrap_samples": 400, "latency_samples": 50},
    "stress": {"edge_states": 1000, "gaming_episodes": 500, "policy_episodes": 400},
    "recalibrate": {"check_samples": 2000},
    "label_queue": {"threshold": 0.2, "min_cluster_states": 5, "min_bucket_states": 1, "clusters": 4},
    # Hundreds of live episodes cannot judge a candidate off-policy: these worlds test the loop's
    # mechanics, so the sandbox's gates decide (the hold at the canary stage has its own tests).
    "ope": {"required": False},
}


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """Migrate the session's Airflow metadata DB (its home is set in tests/conftest.py) and create
    the ``gpu`` pool the training tasks use."""
    from airflow import settings

    # The database this process's Airflow opened (its settings are read once, at first import) is
    # the one to migrate, whatever the environment says by now.
    # The environment's database is migrated too: `airflow` subprocesses of the tests open that one.
    urls = dict.fromkeys([str(settings.SQL_ALCHEMY_CONN), os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]])
    for url in urls:
        env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
        for cmd in (["db", "migrate"], ["pools", "set", "gpu", "1", "GPU training slots"]):
            out = subprocess.run(
                [sys.executable, "-m", "airflow", *cmd], env=env, capture_output=True, text=True, timeout=600
            )
            assert out.returncode == 0, out.stderr[-3000:]
    return env["AIRFLOW_HOME"]


@pytest.fixture()
def rlops_home(tmp_path: Path, tmp_tracking: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project home: storage, MLflow and the label queue under tmp, tiny budgets."""
    from rlops.common.config import deep_merge

    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params = deep_merge(params, TINY)
    params["storage"]["root"] = f"file://{tmp_path / 'data'}"
    params["tracking"]["uri"] = tmp_tracking
    params["label_queue"]["db_url"] = f"sqlite:///{tmp_path / 'queue.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("RLOPS_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    for var in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


# --------------------------------------------------------------------------- MLflow server
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def mlflow_server(tmp_path: Path, _mlflow_template_db: Path) -> Any:
    """A real ``mlflow server`` on 127.0.0.1 (SQL backend: a copy of the pre-migrated SQLite DB,
    proxied artifacts under tmp) that may call webhooks on ``http`` and private addresses, as a
    local receiver needs. Yields its URL."""
    import shutil
    import time
    import urllib.request

    from cryptography.fernet import Fernet

    folder = tmp_path / "mlflow-server"
    folder.mkdir()
    shutil.copyfile(_mlflow_template_db, folder / "mlflow.db")
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
        "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
        "MLFLOW_WEBHOOK_CACHE_TTL": "1",
        "MLFLOW_WEBHOOK_REQUEST_MAX_RETRIES": "1",
        "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": Fernet.generate_key().decode(),
    }
    log = open(folder / "server.log", "w")  # noqa: SIM115 - the server writes to it until the fixture ends
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=folder,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {(folder / 'server.log').read_text()[-3000:]}")
        time.sleep(0.5)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def swap_request(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[type, type], type]]:
    """``swap(old, new)``: every rlops module, and every DAG's list of requests, sees the request
    class ``new`` where it had ``old`` — as if a developer had added ``new``'s options to ``old``.
    A module first imported during the test, which took ``new``, gets ``old`` back at the end."""
    import sys

    from rlops.pipeline_steps.orchestration import run_conf, settings

    swapped: list[tuple[type, type]] = []

    def rlops_modules() -> list[Any]:
        return [m for n, m in list(sys.modules.items()) if n.startswith("rlops.") and m is not None]

    def swap(old: type, new: type) -> type:
        for module in rlops_modules():
            for attr, value in list(vars(module).items()):
                if value is old:
                    monkeypatch.setattr(module, attr, new)
        for kind, requests in settings.DAG_REQUESTS.items():
            monkeypatch.setitem(settings.DAG_REQUESTS, kind, tuple(new if r is old else r for r in requests))
        monkeypatch.setattr(run_conf, "_ALWAYS", tuple(new if r is old else r for r in run_conf._ALWAYS))
        swapped.append((old, new))
        return new

    yield swap
    monkeypatch.undo()
    for old, new in swapped:
        for module in rlops_modules():
            for attr, value in list(vars(module).items()):
                if value is new:
                    setattr(module, attr, old)

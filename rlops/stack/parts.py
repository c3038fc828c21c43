"""What the stack runs: each part's command, environment, port and health URL, built from the
project params (block ``stack``) and the stack's secrets. Nothing here starts anything."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rlops.common import airflow_api
from rlops.common.config import REPO_ROOT, home, resolve_local
from rlops.common.params_model import Params
from rlops.stack.home import StackHome

_DROPPED_ENV = ("AIRFLOW_", "AIRFLOW__", "MLFLOW_TRACKING_URI", "MLFLOW_WEBHOOK_")
SIMPLE_AUTH = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


@dataclass(frozen=True)
class Part:
    """One process of the stack."""

    name: str
    argv: tuple[str, ...]
    port: int | None = None
    health: str | None = None
    """URL that answers 2xx once the part serves; None: alive is all there is to check."""
    url: str | None = None
    """What a person opens (a UI), if anything."""
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StackLayout:
    """The whole stack as configured: parts in start order, and the settings shared by several."""

    home: StackHome
    host: str
    airflow_url: str
    mlflow_url: str
    mlflow_started: bool
    """False when ``tracking.uri`` already names an MLflow server: the stack uses it and starts none."""
    database_url: str
    parts: tuple[Part, ...]

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)


def _python() -> str:
    return sys.executable


def _rlops(*args: str) -> tuple[str, ...]:
    return (_python(), "-m", "rlops.cli", *args)


def _base_env(stack: StackHome) -> dict[str, str]:
    """This process's environment without Airflow's or MLflow's settings of another deployment,
    plus what every part shares: the project home and params."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV)}
    env["RLOPS_HOME"] = str(home())
    if os.environ.get("RLOPS_PARAMS"):
        env["RLOPS_PARAMS"] = str(Path(os.environ["RLOPS_PARAMS"]).resolve())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def airflow_env(
    stack: StackHome, params: Params, secrets: Mapping[str, str], database_url: str, shared: Mapping[str, str]
) -> dict[str, str]:
    """Airflow's configuration, by environment only (``AIRFLOW_HOME`` holds no airflow.cfg of ours)."""
    s = params.stack
    api = f"http://{s.host}:{s.airflow_port}"
    return {
        **shared,
        "AIRFLOW_HOME": str(stack.airflow_home),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(s.parallelism),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__FERNET_KEY": secrets["fernet_key"],
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
        # Tasks reach the metadata DB only through the API server's execution API, with JWTs the
        # scheduler signs: one shared secret, and the API's own address (not the default 8080).
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets["jwt_secret"],
        "AIRFLOW__API__SECRET_KEY": secrets["api_secret_key"],
        "AIRFLOW__API__HOST": s.host,
        "AIRFLOW__API__PORT": str(s.airflow_port),
        "AIRFLOW__API__BASE_URL": f"{api}/",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(stack.passwords_file),
    }


def layout(params: Params, stack: StackHome, secrets: Mapping[str, str], database_url: str) -> StackLayout:
    """The parts of the stack for these params (see the module doc)."""
    s = params.stack
    tracking = resolve_local(params.tracking.uri)
    mlflow_started = not tracking.startswith(("http://", "https://"))
    mlflow_url = f"http://{s.host}:{s.mlflow_port}" if mlflow_started else tracking.rstrip("/")
    airflow_url = f"http://{s.host}:{s.airflow_port}"
    shared = {
        **_base_env(stack),
        "MLFLOW_TRACKING_URI": mlflow_url,
        "RLOPS_REGISTRY_KEY": secrets["registry_key"],
        airflow_api.URL_ENV: airflow_url,
        airflow_api.CREDENTIALS_ENV: str(stack.credentials_file),
    }
    af = airflow_env(stack, params, secrets, database_url, shared)
    parts: list[Part] = []
    if mlflow_started:
        artifacts = resolve_local(params.tracking.artifact_root or "rlops-data/mlartifacts").removeprefix("file://")
        parts.append(
            Part(
                "mlflow",
                (
                    _python(),
                    "-m",
                    "mlflow",
                    "server",
                    "--backend-store-uri",
                    tracking,
                    "--artifacts-destination",
                    artifacts,
                    "--host",
                    s.host,
                    "--port",
                    str(s.mlflow_port),
                    "--workers",
                    "1",
                ),  # fmt: skip
                port=s.mlflow_port,
                health=f"{mlflow_url}/health",
                url=mlflow_url,
                env={
                    **shared,
                    # the receiver listens on this machine over http: MLflow refuses both by default
                    "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
                    "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
                    "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": secrets["mlflow_webhook_key"],
                    # the job runner (a huey consumer and its workers, ~1 GB idle) serves GenAI
                    # evaluation jobs; rlops starts none, and webhooks are delivered without it
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                },
            )
        )
    parts += [
        Part(
            "airflow-api-server",
            (_python(), "-m", "airflow", "api-server", "--host", s.host, "--port", str(s.airflow_port)),
            port=s.airflow_port,
            health=f"{airflow_url}/api/v2/monitor/health",
            url=airflow_url,
            env=af,
        ),
        # LocalExecutor: task logs are files under AIRFLOW_HOME the API server reads itself, so no
        # log server (it would listen on 0.0.0.0:8793).
        Part("airflow-scheduler", (_python(), "-m", "airflow", "scheduler", "--skip-serve-logs"), env=af),
        Part("airflow-dag-processor", (_python(), "-m", "airflow", "dag-processor"), env=af),
        Part("airflow-triggerer", (_python(), "-m", "airflow", "triggerer", "--skip-serve-logs"), env=af),
        Part(
            "webhook",
            _rlops("model", "webhook", "serve", "--mode", "airflow", "--host", s.host, "--port", str(s.webhook_port)),
            port=s.webhook_port,
            health=f"http://{s.host}:{s.webhook_port}/healthz",
            env={**shared, params.promotion.webhook.secret_env: secrets["webhook_secret"]},
        ),
        Part(
            "console",
            _rlops("console", "--host", s.host, "--port", str(s.console_port)),
            port=s.console_port,
            health=f"http://{s.host}:{s.console_port}/",
            url=f"http://{s.host}:{s.console_port}",
            env=shared,
        ),
    ]
    parts.append(
        Part(
            "log-rotation",
            (_python(), "-m", "rlops.stack.log_rotation", str(stack.logs), str(s.log_max_mb), str(s.log_keep)),
            env=_base_env(stack),
        )
    )
    return StackLayout(stack, s.host, airflow_url, mlflow_url, mlflow_started, database_url, tuple(parts))

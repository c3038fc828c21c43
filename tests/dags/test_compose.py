"""Static checks of the distributed deployment in ``docker/``.

No Docker engine is needed: the compose file is read with PyYAML and interpolated the way
``docker compose`` does (``${VAR:-default}``, ``${VAR:?error}``, ``$$``) from
``docker/.env.example``, the Dockerfiles are parsed line by line, and the DAGs are loaded with
Airflow's ``DagBag`` to check that every queue and pool they use is served by the deployment.
When a ``docker compose`` (or ``docker-compose``) client is installed, ``config -q`` validates the
file against the Compose specification as well; otherwise that one test is skipped.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT

REPO = REPO_ROOT
DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERFILE_GPU = DOCKER / "Dockerfile.gpu"
LOCK = REPO / "requirements" / "lock.txt"
DAGS = REPO / "dags"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
    "airflow-worker-gpu",
)
REQUIRED_SERVICES = (*AIRFLOW_SERVICES, "postgres", "redis", "minio", "minio-init", "mlflow")
# Environment the rlops code reads (rlops/common/config.py adds its overrides in test_project_env).
PROJECT_ENV = (
    "RLOPS_PARAMS",
    "RLOPS_HOME",
    "RLOPS_STORAGE_ROOT",
    "RLOPS_S3_ENDPOINT_URL",
    "MLFLOW_TRACKING_URI",
    "RLOPS_ARTIFACT_ROOT",
    "RLOPS_QUEUE_DB",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
)
DAGS_TARGET = "/opt/airflow/dags"
AIRFLOW_BASE_IMAGE = "apache/airflow:3.3.2-python3.11"
TORCH_PIN = "torch==2.13.0"


# --------------------------------------------------------------------------- helpers
def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a compose ``.env`` file (comments and blanks skipped)."""
    env: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}:{lineno}: expected KEY=VALUE, got {raw!r}"
        env[key.strip()] = value.strip()
    return env


_VAR = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_]\w*)"
)


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose-style interpolation of one string (no nesting, which the file does not use)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        value = env.get(name)
        if op in (":-", "-"):
            unset = value is None or (op == ":-" and value == "")
            return arg if unset else value  # type: ignore[return-value]
        if op in (":?", "?"):
            assert value is not None and (op == "?" or value != ""), f"required variable {name} is not set ({arg})"
            return value
        if op in (":+", "+"):
            return arg if value else ""
        return value or ""

    return _VAR.sub(sub, text)


def interpolate_tree(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    return node


def required_vars(text: str) -> set[str]:
    """Variables the compose file demands with ``${VAR:?…}`` / ``${VAR?…}``."""
    return {m.group("name") for m in _VAR.finditer(text) if m.group("name") and m.group("op") in (":?", "?")}


def example_env() -> dict[str, str]:
    """``.env.example`` with every empty secret filled by a placeholder, as an operator would."""
    env = read_env_file(ENV_EXAMPLE)
    return {k: (v if v else f"test-{k.lower().replace('_', '-')}") for k, v in env.items()}


@pytest.fixture(scope="module")
def raw_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), (
        f"{COMPOSE_FILE}: expected a mapping with a 'services' section"
    )
    return data


@pytest.fixture(scope="module")
def compose(raw_compose: dict[str, Any]) -> dict[str, Any]:
    """The compose file after YAML merges and interpolation from ``.env.example``."""
    env = example_env()
    # Only the environment the file is rendered with; a developer's shell must not leak in.
    return interpolate_tree(raw_compose, env)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", ...] form
        env = dict(item.partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def argv(command: Any) -> list[str]:
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def worker_queues(service: dict[str, Any]) -> set[str]:
    """Queues named by ``--queues``/``-q`` in a Celery worker command (Airflow default otherwise)."""
    args = argv(service.get("command"))
    for i, arg in enumerate(args):
        if arg in ("--queues", "-q") and i + 1 < len(args):
            return {q.strip() for q in args[i + 1].split(",") if q.strip()}
        if arg.startswith("--queues="):
            return {q.strip() for q in arg.split("=", 1)[1].split(",") if q.strip()}
    return {"default"}


def is_worker(service: dict[str, Any]) -> bool:
    args = argv(service.get("command"))
    return "celery" in args and "worker" in args


def volume_entries(service: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(type, source, target) of every volume of a service, short or long syntax."""
    for vol in service.get("volumes") or []:
        if isinstance(vol, dict):
            yield vol.get("type", "volume"), str(vol.get("source", "")), str(vol["target"])
            continue
        parts = str(vol).split(":")
        if len(parts) == 1:  # anonymous volume
            yield "volume", "", parts[0]
            continue
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        yield kind, source, target


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_base(path: Path) -> str:
    """The first stage's base image, with ``ARG`` defaults declared before ``FROM`` applied."""
    args: dict[str, str] = {}
    for word, rest in dockerfile_instructions(path):
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
        elif word == "FROM":
            image = rest.split()[0] if not rest.startswith("--") else rest.split()[1]
            return interpolate(image, args)
    raise AssertionError(f"{path}: no FROM instruction")


def dockerfile_args(path: Path) -> dict[str, str]:
    args: dict[str, str] = {}
    for word, rest in dockerfile_instructions(path):
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
    return args


def lock_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return pins


# --------------------------------------------------------------------------- services and env
def test_required_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = sorted(set(REQUIRED_SERVICES) - set(services))
    assert not missing, f"docker-compose.yaml lacks services {missing}"


def test_airflow_services_share_the_common_environment(services: dict[str, dict[str, Any]]) -> None:
    jwt, fernet = set(), set()
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        where = f"service {name}"
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "CeleryExecutor", where
        assert re.fullmatch(
            r"postgresql\+psycopg2://airflow:[^@]+@postgres(:5432)?/airflow",
            env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""),
        ), where
        assert env.get("AIRFLOW__CELERY__BROKER_URL") == "redis://:@redis:6379/0", where
        assert re.fullmatch(
            r"db\+postgresql://airflow:[^@]+@postgres(:5432)?/airflow", env.get("AIRFLOW__CELERY__RESULT_BACKEND", "")
        ), where
        assert env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") == "http://airflow-apiserver:8080/execution/", where
        assert env.get("AIRFLOW__CORE__LOAD_EXAMPLES", "").lower() == "false", where
        assert env.get("AIRFLOW__CORE__DAGS_FOLDER") == DAGS_TARGET, where
        assert env.get("AIRFLOW__API_AUTH__JWT_SECRET"), f"{where}: no JWT secret"
        assert env.get("AIRFLOW__CORE__FERNET_KEY"), f"{where}: no Fernet key"
        jwt.add(env["AIRFLOW__API_AUTH__JWT_SECRET"])
        fernet.add(env["AIRFLOW__CORE__FERNET_KEY"])
    # Task tokens are signed by the scheduler and checked by the API server: one secret for all.
    assert len(jwt) == 1, "the Airflow services do not share one JWT secret"
    assert len(fernet) == 1, "the Airflow services do not share one Fernet key"


def test_project_env_is_set_for_every_airflow_service(services: dict[str, dict[str, Any]]) -> None:
    from rlops.common import config

    wanted = set(PROJECT_ENV) | set(config._ENV_OVERRIDES)  # every override the loader knows
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        missing = sorted(v for v in wanted if not env.get(v))
        assert not missing, f"service {name}: project environment {missing} not set"
        assert env["RLOPS_STORAGE_ROOT"].startswith("s3://"), name
        assert env["RLOPS_S3_ENDPOINT_URL"] == "http://minio:9000", name
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000", name
        assert env["RLOPS_QUEUE_DB"].startswith("postgresql"), name
        assert env["RLOPS_PARAMS"].endswith("params.yaml"), name


def test_workers_serve_default_and_gpu_queues(services: dict[str, dict[str, Any]]) -> None:
    cpu, gpu = services["airflow-worker"], services["airflow-worker-gpu"]
    assert is_worker(cpu) and is_worker(gpu)
    assert argv(cpu["command"])[:3] == ["airflow", "celery", "worker"]
    assert argv(gpu["command"])[:3] == ["airflow", "celery", "worker"]
    assert worker_queues(cpu) == {"default"}
    assert worker_queues(gpu) == {"gpu"}

    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d.get("driver") == "nvidia"
        and "gpu" in d.get("capabilities", [])
        and (d.get("count") == "all" or int(d.get("count", 0)) >= 1)
        for d in devices
    ), f"airflow-worker-gpu: no NVIDIA GPU reservation in {devices}"
    assert "deploy" not in cpu, "the CPU worker should not reserve devices"
    assert gpu["build"]["dockerfile"].endswith("Dockerfile.gpu")
    assert gpu["image"] != cpu["image"], "the GPU worker needs its own (CUDA) image"


def test_airflow_init_migrates_and_creates_the_gpu_pool(services: dict[str, dict[str, Any]]) -> None:
    init = services["airflow-init"]
    script = " ".join(argv(init.get("command")))
    assert "airflow db migrate" in script
    assert re.search(r"airflow pools set gpu\b", script), "airflow-init must create the gpu pool"
    # The password file it writes is the one the API server's auth manager reads.
    pw_file = env_of(init)["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    assert pw_file in script
    pw_dir = str(Path(pw_file).parent)
    for name in ("airflow-init", "airflow-apiserver"):
        mounts = {target: source for _, source, target in volume_entries(services[name])}
        assert pw_dir in mounts, f"service {name} does not mount {pw_dir}"
    assert {t: s for _, s, t in volume_entries(init)}[pw_dir] == {
        t: s for _, s, t in volume_entries(services["airflow-apiserver"])
    }[pw_dir]


def test_service_commands(services: dict[str, dict[str, Any]]) -> None:
    expected = {
        "airflow-apiserver": ["airflow", "api-server"],
        "airflow-scheduler": ["airflow", "scheduler"],
        "airflow-dag-processor": ["airflow", "dag-processor"],
        "airflow-triggerer": ["airflow", "triggerer"],
    }
    for name, cmd in expected.items():
        assert argv(services[name]["command"]) == cmd, name


def test_mlflow_server(services: dict[str, dict[str, Any]]) -> None:
    svc = services["mlflow"]
    args = argv(svc["command"])
    assert args[:2] == ["mlflow", "server"], args

    def opt(flag: str) -> str:
        assert flag in args, f"mlflow server lacks {flag}"
        return args[args.index(flag) + 1]

    assert re.fullmatch(r"postgresql://mlflow:[^@]+@postgres(:5432)?/mlflow", opt("--backend-store-uri"))
    assert opt("--artifacts-destination").startswith("s3://")
    assert opt("--host") == "0.0.0.0" and opt("--port") == "5000"
    assert env_of(svc)["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    # MLflow 3 rejects unknown Host headers: the name the workers use must be allowed.
    allowed = [h.strip() for h in opt("--allowed-hosts").split(",")]
    assert any(fnmatch.fnmatch("mlflow:5000", h) or h == "mlflow:5000" for h in allowed), allowed


def test_buckets_and_databases_are_created(services: dict[str, dict[str, Any]]) -> None:
    # Buckets named in the storage root and MLflow's artifact destination are made by minio-init.
    init_env = env_of(services["minio-init"])
    script = " ".join(argv(services["minio-init"].get("command")))
    made = set()
    for m in re.finditer(r"mc mb (?:--ignore-existing )?\"?local/\$(\w+)", script):
        made.add(init_env[m.group(1)])
    storage_bucket = env_of(services["airflow-worker"])["RLOPS_STORAGE_ROOT"][5:].split("/")[0]
    args = argv(services["mlflow"]["command"])
    mlflow_bucket = args[args.index("--artifacts-destination") + 1][5:].split("/")[0]
    assert {storage_bucket, mlflow_bucket} <= made, (storage_bucket, mlflow_bucket, made)

    # Databases in the connection URLs are created by the postgres init script.
    init_mount = [
        s for kind, s, t in volume_entries(services["postgres"]) if t.startswith("/docker-entrypoint-initdb.d/")
    ]
    assert init_mount, "postgres has no init script mounted"
    sql = (DOCKER / init_mount[0]).read_text()
    created = set(re.findall(r"CREATE DATABASE (\w+)", sql))
    urls = [
        env_of(services["airflow-scheduler"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
        env_of(services["airflow-scheduler"])["RLOPS_QUEUE_DB"],
        args[args.index("--backend-store-uri") + 1],
    ]
    for url in urls:
        assert url.rsplit("/", 1)[1] in created, f"database of {url.split('@')[-1]} not created"


# --------------------------------------------------------------------------- promotion from the MLflow UI
WEBHOOK_SERVICE = "webhook"
WEBHOOK_PORT = "8766"
# Airflow's simple auth manager: the roles that may trigger DAG runs (and read pools).
TRIGGER_ROLES = {"user", "op", "admin"}


def service_argv(service: dict[str, Any]) -> list[str]:
    """What the container runs: its entrypoint (when set) followed by its command."""
    return [*argv(service.get("entrypoint")), *argv(service.get("command"))]


def runs_rlops(service: dict[str, Any]) -> bool:
    """A container of the project's images that runs rlops code: the Airflow services (their tasks
    import rlops), the webhook receiver and the one-shots; not the MLflow server the image also runs."""
    if "build" not in service:
        return False
    args = service_argv(service)
    return not ("mlflow" in args and "server" in args)


def rlops_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {name: svc for name, svc in services.items() if runs_rlops(svc)}
    assert set(AIRFLOW_SERVICES) <= set(found), sorted(found)
    return found


def webhook_commands(services: dict[str, dict[str, Any]], action: str) -> dict[str, list[str]]:
    """``{service: argv after "rlops"}`` of the services that run ``rlops model webhook <action>``."""
    out = {}
    for name, svc in services.items():
        args = service_argv(svc)
        if "rlops" in args:
            rest = args[args.index("rlops") + 1 :]
            if rest[:3] == ["model", "webhook", action]:
                out[name] = rest
    return out


def parsed(rlops_args: list[str]) -> Any:
    """The rlops command line parsed by the real parser (an unknown flag fails the test)."""
    from rlops.cli import build_parser

    return build_parser().parse_args(rlops_args)


def mounted_configs(service: dict[str, Any]) -> dict[str, str]:
    """``{target path: config name}`` of the configs a service mounts (short or long syntax)."""
    out = {}
    for entry in service.get("configs") or []:
        if isinstance(entry, str):
            out[f"/{entry}"] = entry
        else:
            out[str(entry.get("target") or f"/{entry['source']}")] = str(entry["source"])
    return out


def credentials_of(compose: dict[str, Any], service: dict[str, Any]) -> dict[str, str]:
    """The Airflow credentials file a service's ``RLOPS_AIRFLOW_CREDENTIALS`` names, as JSON."""
    path = env_of(service).get("RLOPS_AIRFLOW_CREDENTIALS", "")
    assert path, "RLOPS_AIRFLOW_CREDENTIALS is not set"
    configs = mounted_configs(service)
    assert path in configs, f"{path} is not a config mounted in the service (mounts {sorted(configs)})"
    content = (compose.get("configs") or {}).get(configs[path], {}).get("content")
    assert content, f"config {configs[path]} has no inline content"
    doc = json.loads(content)
    assert isinstance(doc.get("username"), str) and isinstance(doc.get("password"), str) and doc["password"], doc
    return doc


def simple_auth_roles(service: dict[str, Any]) -> dict[str, str]:
    users = env_of(service).get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "")
    return {u.split(":")[0]: u.split(":")[1].lower() for u in users.split(",") if ":" in u}


def test_webhook_receiver_service(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    assert WEBHOOK_SERVICE in services, "no webhook receiver service: MLflow UI promotions reach nothing"
    svc = services[WEBHOOK_SERVICE]
    serving = webhook_commands(services, "serve")
    assert list(serving) == [WEBHOOK_SERVICE], f"services running the receiver: {sorted(serving)}"
    args = parsed(serving[WEBHOOK_SERVICE])
    assert args.mode == "airflow", "the receiver must trigger promote__<pack> in Airflow (--mode airflow)"
    assert args.host == "0.0.0.0" and str(args.port) == WEBHOOK_PORT, (args.host, args.port)
    # The Airflow image's entrypoint would run "rlops" as an Airflow sub-command.
    assert svc.get("entrypoint"), "the receiver must bypass the Airflow entrypoint"
    health = " ".join(argv(svc.get("healthcheck", {}).get("test")))
    assert f"localhost:{WEBHOOK_PORT}/healthz" in health, health

    env = env_of(svc)
    assert env.get("RLOPS_WEBHOOK_SECRET"), "the receiver refuses every delivery without RLOPS_WEBHOOK_SECRET"
    assert env.get("MLFLOW_TRACKING_URI") == "http://mlflow:5000"
    url = env.get("RLOPS_AIRFLOW_URL", "")
    assert re.fullmatch(r"http://airflow-apiserver:8080/?", url), f"RLOPS_AIRFLOW_URL={url!r}"
    assert argv(services["airflow-apiserver"]["command"]) == ["airflow", "api-server"]  # listens on 8080
    creds = credentials_of(compose, svc)
    role = simple_auth_roles(services["airflow-apiserver"]).get(creds["username"])
    assert role in TRIGGER_ROLES, f"Airflow user {creds['username']!r} (role {role}) cannot trigger DAG runs"


def test_mlflow_accepts_and_registers_the_webhook(
    services: dict[str, dict[str, Any]], raw_compose: dict[str, Any]
) -> None:
    env = env_of(services["mlflow"])
    schemes = {s.strip() for s in env.get("MLFLOW_WEBHOOK_ALLOWED_SCHEMES", "").split(",")}
    assert "http" in schemes, "MLflow refuses the receiver's http:// URL (MLFLOW_WEBHOOK_ALLOWED_SCHEMES)"
    assert env.get("MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS", "").lower() == "true", (
        "MLflow refuses a receiver on the compose network (MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS)"
    )
    # A fixed key from .env: each server process would otherwise encrypt the secret with its own.
    raw_key = str(env_of(raw_compose["services"]["mlflow"]).get("MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY", ""))
    assert re.fullmatch(r"\$\{MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY:\?[^}]*\}", raw_key), raw_key
    assert read_env_file(ENV_EXAMPLE).get("MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY") == ""

    registering = webhook_commands(services, "register")
    assert len(registering) == 1, f"services registering the MLflow webhook: {sorted(registering)}"
    ((name, rlops_args),) = registering.items()
    svc = services[name]
    assert str(svc.get("restart", "no")) == "no", f"{name} is a one-shot"
    assert (svc.get("depends_on") or {}).get("mlflow", {}).get("condition") == "service_healthy", name
    target = urllib.parse.urlsplit(parsed(rlops_args).url)
    assert target.scheme == "http" and target.hostname == WEBHOOK_SERVICE, target
    assert str(target.port) == WEBHOOK_PORT and target.path == "/mlflow/webhook", target
    reg_env = env_of(svc)
    assert reg_env.get("MLFLOW_TRACKING_URI") == "http://mlflow:5000", name
    # The secret MLflow signs with is the one the receiver checks: the same .env variable.
    raw = {n: env_of(raw_compose["services"][n]).get("RLOPS_WEBHOOK_SECRET") for n in (name, WEBHOOK_SERVICE)}
    assert raw[name] and raw[name] == raw[WEBHOOK_SERVICE], raw
    assert re.fullmatch(r"\$\{RLOPS_WEBHOOK_SECRET:\?[^}]*\}", str(raw[name])), raw[name]
    assert read_env_file(ENV_EXAMPLE).get("RLOPS_WEBHOOK_SECRET") == ""


def test_every_rlops_container_shares_the_registry_key(
    services: dict[str, dict[str, Any]], raw_compose: dict[str, Any]
) -> None:
    names = rlops_services(services)
    assert WEBHOOK_SERVICE in names, "the webhook receiver runs rlops"
    raw = {n: env_of(raw_compose["services"][n]).get("RLOPS_REGISTRY_KEY") for n in names}
    missing = sorted(n for n, v in raw.items() if not v)
    assert not missing, f"RLOPS_REGISTRY_KEY not set for {missing}: each makes its own key and refuses the others'"
    # One required variable from docker/.env, never a literal or a default that differs per host.
    for n, value in raw.items():
        assert re.fullmatch(r"\$\{RLOPS_REGISTRY_KEY:\?[^}]*\}", str(value)), f"{n}: RLOPS_REGISTRY_KEY={value!r}"
    assert len({env_of(services[n])["RLOPS_REGISTRY_KEY"] for n in names}) == 1
    assert read_env_file(ENV_EXAMPLE).get("RLOPS_REGISTRY_KEY") == "", ".env.example must not ship a registry key"
    assert "RLOPS_REGISTRY_KEY" in required_vars(COMPOSE_FILE.read_text())


def test_tasks_reach_the_airflow_api(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    # The retrain DAGs' first task asks the API server whether its pool exists; the receiver triggers
    # promote__<pack> there. Both log in with the same credentials file, whose user airflow-init creates.
    roles = simple_auth_roles(services["airflow-apiserver"])
    users = set()
    for name, svc in rlops_services(services).items():
        env = env_of(svc)
        assert re.fullmatch(r"http://airflow-apiserver:8080/?", env.get("RLOPS_AIRFLOW_URL", "")), name
        creds = credentials_of(compose, svc)
        assert roles.get(creds["username"]) in TRIGGER_ROLES, f"{name}: user {creds['username']!r} has no usable role"
        users.add((creds["username"], creds["password"]))
    assert len(users) == 1, "the rlops containers log in to Airflow as different users"
    init_script = " ".join(argv(services["airflow-init"].get("command")))
    assert "RLOPS_AIRFLOW_CREDENTIALS" in init_script, "airflow-init must give the rlops user its password"
    # Every pool params name (params.stack.pools: the one-machine stack's list) is created by the init.
    from rlops.common.config import resolve_params

    created = set(re.findall(r"airflow pools set (\w+)", init_script))
    assert set(resolve_params().model.stack.pools) <= created, created


def _unpause_selection(init: dict[str, Any]) -> tuple[str, str, str]:
    """The python program airflow-init runs to choose the DAGs to unpause, the script after it, and
    the shell variable it sets."""
    script = init["command"][-1]
    m = re.search(r"(\w+)=\$\(python - <<'PY'\n(.*?)\nPY\n\)", script, re.DOTALL)
    assert m, "airflow-init chooses no DAGs to unpause (expected VAR=$(python - <<'PY' … PY))"
    return m.group(2), script[m.end() :], m.group(1)


def test_init_unpauses_promote_of_every_pack(services: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    from rlops.common.config import resolve_params, scenarios_dir
    from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, dag_id
    from rlops.stack.airflow_setup import wanted_unpaused

    init = services["airflow-init"]
    script = init["command"][-1]
    program, after, var = _unpause_selection(init)
    unpause = re.search(rf'airflow dags unpause --treat-dag-id-as-regex (--yes|-y) "\${var}"', after)
    assert unpause, f"airflow-init does not unpause the DAGs in ${var}"
    # The DAGs must be in the metadata DB before they can be unpaused: the dag-processor starts later.
    assert 0 <= script.find("airflow dags reserialize") < script.find(program), "no `airflow dags reserialize` first"

    # Run the selection as the container would, against this repository's params and packs.
    env = {**os.environ, **env_of(init), "RLOPS_HOME": str(tmp_path), "RLOPS_PARAMS": str(REPO / "params.yaml")}
    env["RLOPS_SCENARIOS_DIR"] = str(REPO / "scenarios")
    proc = subprocess.run(
        [sys.executable, "-"], input=program, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    pattern = proc.stdout.strip()

    params = resolve_params().model
    packs = sorted(p.name for p in scenarios_dir(params.model_dump()).iterdir() if (p / "scenario.yaml").is_file())
    assert packs, "no scenario packs"
    dag_ids = {dag_id(k, p) for k in DAG_KINDS for p in packs}
    matched = {d for d in dag_ids if pattern and re.search(pattern, d)}
    # The rule of `rlops stack up` (params dags.unpaused; null: the scenario pack + promote of every pack).
    assert matched == set(wanted_unpaused(params, dag_ids, packs)), (pattern, sorted(matched))
    if params.dags.unpaused is None:
        missing = sorted(f"promote__{p}" for p in packs if f"promote__{p}" not in matched)
        assert not missing, f"{missing} stay paused: promotions requested in the MLflow UI queue forever"
        assert {dag_id(k, params.scenario) for k in DAG_KINDS} <= matched


def test_readme_documents_ui_promotion_and_shared_secrets() -> None:
    text = (DOCKER / "README.md").read_text()
    for needle in (
        "RLOPS_REGISTRY_KEY",
        "RLOPS_WEBHOOK_SECRET",
        "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY",
        "RLOPS_AIRFLOW_PASSWORD",
        "rlops stack up",
        "challenger",
        "promote__",
    ):
        assert needle in text, f"docker/README.md does not mention {needle}"


# --------------------------------------------------------------------------- volumes, deps, builds
def test_dag_folder_is_mounted(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        sources = [s for kind, s, t in volume_entries(services[name]) if t == DAGS_TARGET]
        assert sources, f"service {name} does not mount the DAG folder at {DAGS_TARGET}"
        assert (DOCKER / sources[0]).resolve() == DAGS.resolve(), (
            f"service {name} mounts {sources[0]}, not the repository's dags/"
        )


def test_volumes_are_declared_and_bind_sources_exist(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, svc in compose["services"].items():
        for kind, source, _target in volume_entries(svc):
            if kind == "volume" and source:
                assert source in declared, f"service {name}: volume {source!r} is not declared"
                used.add(source)
            elif kind == "bind":
                assert (DOCKER / source).exists(), f"service {name}: bind source {source} missing"
    assert declared == used, f"declared but unused volumes: {sorted(declared - used)}"


def test_depends_on_conditions_are_satisfiable(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        for dep, spec in deps.items():
            assert dep in services, f"service {name} depends on unknown service {dep}"
            cond = spec.get("condition", "service_started")
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"{name} waits for {dep} to be healthy, but {dep} has no healthcheck"
                )
            elif cond == "service_completed_successfully":
                assert str(services[dep].get("restart", "no")) == "no", (
                    f"{dep} is awaited to complete, so it must not restart"
                )
            else:
                assert cond == "service_started", f"{name}: unknown condition {cond}"
    # Every long-running service reports health (one-shot init containers excepted).
    for name, svc in services.items():
        if str(svc.get("restart", "no")) != "no":
            assert "healthcheck" in svc, f"service {name} has no healthcheck"


def test_builds_use_the_repository_root_and_existing_dockerfiles(services: dict[str, dict[str, Any]]) -> None:
    by_image: dict[str, set[str]] = {}
    for name, svc in services.items():
        build = svc.get("build")
        if build is None:
            continue
        build = {"context": build} if isinstance(build, str) else build
        assert (DOCKER / build["context"]).resolve() == REPO.resolve(), name
        dockerfile = REPO / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"service {name}: {dockerfile} missing"
        by_image.setdefault(svc["image"], set()).add(str(dockerfile))
    # One tag, one recipe: services that share an image build it from the same Dockerfile.
    for image, files in by_image.items():
        assert len(files) == 1, f"image {image} is built from several Dockerfiles: {files}"
    assert str(DOCKERFILE) in set().union(*by_image.values())
    assert str(DOCKERFILE_GPU) in set().union(*by_image.values())


def test_env_example_covers_the_compose_variables() -> None:
    text = COMPOSE_FILE.read_text()
    example = read_env_file(ENV_EXAMPLE)
    missing = sorted(required_vars(text) - set(example))
    assert not missing, f".env.example lacks the required variables {missing}"
    used = {m.group("name") or m.group("bare") for m in _VAR.finditer(text) if m.group(0) != "$$"}
    stale = sorted(set(example) - used)
    assert not stale, f".env.example sets variables the compose file never reads: {stale}"
    # Secrets stay blank in the example; a copied file must be filled in, never used as is.
    for key in required_vars(text):
        if re.search(r"PASSWORD|SECRET|FERNET", key):
            assert example[key] == "", f".env.example ships a value for the secret {key}"


# --------------------------------------------------------------------------- Dockerfiles
def test_default_dockerfile() -> None:
    assert dockerfile_base(DOCKERFILE) == AIRFLOW_BASE_IMAGE
    pins = lock_pins()
    version, python = AIRFLOW_BASE_IMAGE.split(":")[1].split("-python")
    assert pins["apache-airflow"] == version, "base image and lock disagree on Airflow"
    assert pins["torch"] == TORCH_PIN.split("==")[1], "Dockerfile and lock disagree on torch"
    text = DOCKERFILE.read_text()
    assert TORCH_PIN in text
    assert "download.pytorch.org/whl/cpu" in text, "the default image must use CPU torch"
    _check_common_install(DOCKERFILE)


def test_gpu_dockerfile() -> None:
    base = dockerfile_base(DOCKERFILE_GPU)
    assert base.startswith("nvidia/cuda:"), f"GPU image base {base} is not a CUDA image"
    args = dockerfile_args(DOCKERFILE_GPU)
    assert re.fullmatch(r"cu\d{3}", args.get("TORCH_CUDA", "")), (
        "Dockerfile.gpu must name the CUDA wheel variant in ARG TORCH_CUDA (e.g. cu128)"
    )
    cuda = args["TORCH_CUDA"][2:]
    assert base.split(":")[1].startswith(f"{cuda[:-1]}.{cuda[-1]}"), (
        f"base {base} does not match the torch CUDA variant {args['TORCH_CUDA']}"
    )
    text = DOCKERFILE_GPU.read_text()
    assert TORCH_PIN in text
    assert "download.pytorch.org/whl/${TORCH_CUDA}" in text
    assert "python3.11" in text, "workers must run the Python of the Airflow image (3.11)"
    _check_common_install(DOCKERFILE_GPU)


def _check_common_install(path: Path) -> None:
    steps = dockerfile_instructions(path)
    copies = [rest for word, rest in steps if word == "COPY"]
    runs = " && ".join(rest for word, rest in steps if word == "RUN")
    assert any("requirements/lock.txt" in c for c in copies), f"{path.name}: lock not copied"
    assert "pip install -r /opt/rlops/requirements/lock.txt" in runs, path.name
    assert re.search(r"pip install --no-deps (-e )?/opt/rlops", runs), path.name
    assert any(re.search(rf"\bdags/?\s+{DAGS_TARGET}/?$", c) for c in copies), (
        f"{path.name}: DAGs not copied to {DAGS_TARGET}"
    )


# --------------------------------------------------------------------------- DAGs vs deployment
def test_dag_queues_and_pools_are_served(services: dict[str, dict[str, Any]]) -> None:
    if not any(DAGS.glob("*.py")):
        pytest.skip("dags/ holds no DAG files yet")
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # older layout
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]
    bag = DagBag(dag_folder=str(DAGS))  # Airflow 3 keeps the examples in their own bundle
    assert not bag.import_errors, f"DAG import errors: {bag.import_errors}"
    assert bag.dags, "no DAGs loaded from dags/"

    served = set().union(*(worker_queues(s) for s in services.values() if is_worker(s)))
    init_script = " ".join(argv(services["airflow-init"].get("command")))
    pools = {"default_pool"} | set(re.findall(r"airflow pools set (\w+)", init_script))
    gpu_tasks = []
    for dag_id, dag in bag.dags.items():
        for task in dag.tasks:
            assert task.queue in served, (
                f"{dag_id}.{task.task_id} uses queue {task.queue!r}; workers serve {sorted(served)}"
            )
            assert task.pool in pools, (
                f"{dag_id}.{task.task_id} uses pool {task.pool!r}; airflow-init creates {sorted(pools)}"
            )
            if task.queue == "gpu":
                gpu_tasks.append(f"{dag_id}.{task.task_id}")
                assert task.pool == "gpu", f"{dag_id}.{task.task_id}: GPU work outside the gpu pool"
    for dag_id in ("retrain_full__credit_approval", "retrain_incremental__credit_approval"):
        if dag_id in bag.dags:
            assert any(t.startswith(f"{dag_id}.") for t in gpu_tasks), f"{dag_id} trains nothing on the gpu queue"


# --------------------------------------------------------------------------- docs
def test_readme_documents_the_kubernetes_alternative() -> None:
    text = (DOCKER / "README.md").read_text()
    assert "KubernetesExecutor" in text and "nvidia.com/gpu" in text and "pod_override" in text


# --------------------------------------------------------------------------- docker compose itself
def _compose_cli() -> list[str] | None:
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for cli in candidates:
        try:
            probe = subprocess.run([*cli, "version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return cli
    return None


def test_docker_compose_config_validates(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no docker compose client installed (the YAML checks above still ran)")
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in example_env().items()))
    # Only the example's variables: a developer's shell must not change the result.
    clean_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DOCKER_CONFIG", "DOCKER_HOST", "TMPDIR")}
    proc = subprocess.run(
        [*cli, "--env-file", str(env_file), "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"docker compose config failed:\n{proc.stderr}{proc.stdout}"

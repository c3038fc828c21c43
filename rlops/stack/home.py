"""The stack's home: one folder that holds everything ``rlops stack up`` creates and keeps.

::

    <home>/secrets.json              created once (mode 0600): Airflow's admin password, JWT and API
                                     secrets, Fernet keys, the webhook secret shared with MLflow
    <home>/airflow-credentials.json  user and password the rlops processes renew their Airflow token with
    <home>/airflow/                  AIRFLOW_HOME (task logs, the SQLite DB when there is no PostgreSQL)
    <home>/logs/<part>.log           each process's output
    <home>/state.json                the processes this stack started: pid, start time, port

The registry key is the project's (``alias_records.registry_key()``: ``$RLOPS_REGISTRY_KEY`` or the key
file under the project home), handed to every process the stack starts, so the CLI run from the same
project signs and verifies alias records with the same key as the scheduler's tasks and the receiver.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlops.common.errors import UserError

ADMIN_USER = "admin"


def _write_private(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON readable by this user only (atomically: a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{path} is not readable JSON ({exc}); it belongs to `rlops stack`: remove it only after "
            "`rlops stack down`, and `rlops stack up` writes it anew"
        ) from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a JSON object written by `rlops stack`, found {type(doc).__name__}")
    return doc


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class StackHome:
    """The folder of one stack (see the module doc)."""

    root: Path

    @property
    def airflow_home(self) -> Path:
        return self.root / "airflow"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def secrets_file(self) -> Path:
        return self.root / "secrets.json"

    @property
    def credentials_file(self) -> Path:
        return self.root / "airflow-credentials.json"

    @property
    def passwords_file(self) -> Path:
        """Airflow's simple auth manager reads the users' passwords from here."""
        return self.airflow_home / "simple_auth_manager_passwords.json"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def create(self) -> None:
        """The folders, private to this user (they hold secrets)."""
        try:
            for d in (self.root, self.airflow_home, self.logs):
                d.mkdir(parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
        except OSError as exc:
            raise UserError(
                f"cannot create the stack's folders under {self.root} ({exc.strerror or exc}); expected a folder "
                "this user can write (params stack.home, or --home)"
            ) from None

    # ------------------------------------------------------------------ secrets, once
    def secrets(self) -> dict[str, str]:
        """The stack's secrets, created on first use and kept: a second ``up`` reuses them, so tokens,
        stored connections and MLflow's encrypted webhook secret stay valid across restarts."""
        doc = _read_json(self.secrets_file)
        fresh: dict[str, Callable[[], str]] = {
            "airflow_password": lambda: secrets.token_urlsafe(18),
            "jwt_secret": lambda: secrets.token_hex(32),  # HS512 wants at least 64 characters
            "api_secret_key": lambda: secrets.token_hex(16),
            "fernet_key": lambda: base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "mlflow_webhook_key": lambda: base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "webhook_secret": lambda: secrets.token_urlsafe(32),
        }
        missing = {k: make() for k, make in fresh.items() if not isinstance(doc.get(k), str) or not doc.get(k)}
        if missing:
            doc.update(missing)
            _write_private(self.secrets_file, doc)
        password = str(doc["airflow_password"])
        _write_private(self.credentials_file, {"username": ADMIN_USER, "password": password})
        _write_private(self.passwords_file, {ADMIN_USER: password})
        return {k: str(v) for k, v in doc.items()}

    # ------------------------------------------------------------------ processes started
    def state(self) -> dict[str, Any]:
        """``{"database": url, "parts": {name: {"pid": …, "port": …}}}`` as the last ``up`` left it."""
        doc = _read_json(self.state_file)
        parts = doc.get("parts")
        doc["parts"] = {k: v for k, v in parts.items() if isinstance(v, dict)} if isinstance(parts, dict) else {}
        for name, record in doc["parts"].items():
            bad = [k for k in ("pid", "start_ticks") if k in record and not _whole(record[k])]
            if bad:
                raise UserError(
                    f"{self.state_file}: part {name} has {bad[0]} {record[bad[0]]!r}, expected a whole number; "
                    "the file belongs to `rlops stack`: stop what it started by hand, remove the file, and "
                    "`rlops stack up` writes it anew"
                )
        return doc

    def save_state(self, state: dict[str, Any]) -> None:
        _write_private(self.state_file, state)

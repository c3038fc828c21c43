"""rlops' own alias moves, signed, so that nothing written in the MLflow UI can pass for one.

Whoever can set an alias in the MLflow UI can also set a registered-model tag, so the plain record
``rlops.alias.<alias> = <version>`` alone proves nothing: a hand-set champion with a hand-set
record would stand as rlops' own move. Each move rlops makes therefore also writes
``rlops.alias.<alias>.sig = <stamp>:<hex>``, an HMAC-SHA256 over (model, alias, version, stamp)
with the registry key, which the UI does not have. A record whose signature does not verify is
*forged*: readers treat the alias as set around rlops.

The key comes from ``$RLOPS_REGISTRY_KEY`` (set the same value for every process that promotes:
CLI, Airflow workers, the webhook receiver) or, when unset, from ``rlops-data/registry.key``
under the project home, created (mode 0600) on first use — one machine, one key.

What a signature cannot stop: the replay of a signature rlops once wrote for the same model,
alias and version (that move was rlops' own); rollback clears ``previous`` and promotion
re-signs, so a stale pair names a version that already passed the gates.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from rlops.pipeline_steps.infra import tags as K

KEY_ENV = "RLOPS_REGISTRY_KEY"
KEY_FILE = Path("rlops-data") / "registry.key"
RecordState = Literal["absent", "verified", "forged"]


def key_path() -> Path:
    from rlops.common.config import home

    return home() / KEY_FILE


def registry_key() -> bytes:
    """The HMAC key of alias records (see the module doc); created once when neither exists."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode()
    path = key_path()
    try:
        data = path.read_bytes().strip()
        if data:
            return data
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = os.urandom(32).hex().encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as f:
        f.write(fresh)
    return fresh


def _mac(key: bytes, name: str, alias: str, version: str, stamp: str) -> str:
    msg = "\n".join((name, alias, version, stamp)).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def record_tags(name: str, alias: str, version: str | None) -> dict[str, str]:
    """The registered-model tags that record rlops pointing ``alias`` at ``version`` (None: deleted)."""
    v = "" if version is None else str(version)
    stamp = str(time.time_ns())
    return {
        K.alias_written(alias): v,
        K.alias_signature(alias): f"{stamp}:{_mac(registry_key(), name, alias, v, stamp)}",
    }


def record_state(tags: Mapping[str, str], name: str, alias: str) -> RecordState:
    """``absent`` (rlops never recorded this alias), ``verified`` or ``forged``."""
    version, sig = tags.get(K.alias_written(alias)), tags.get(K.alias_signature(alias))
    if version is None and sig is None:
        return "absent"
    if version is None or not sig or ":" not in sig:
        return "forged"
    stamp, mac = sig.split(":", 1)
    expected = _mac(registry_key(), name, alias, str(version), stamp)
    return "verified" if hmac.compare_digest(expected, mac) else "forged"


def verified_version(tags: Mapping[str, str], name: str, alias: str) -> str | None:
    """The version rlops last pointed ``alias`` at, when its record verifies; else None."""
    if record_state(tags, name, alias) != "verified":
        return None
    return tags.get(K.alias_written(alias)) or None

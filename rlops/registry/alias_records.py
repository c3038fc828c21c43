"""rlops' own alias moves, signed, so that nothing written in the MLflow UI can pass for one.

Whoever can set an alias in the MLflow UI can also set a registered-model tag, so the plain record
``rlops.alias.<alias> = <version>`` alone proves nothing: a hand-set champion with a hand-set
record would stand as rlops' own move. Each move rlops makes therefore also writes
``rlops.alias.<alias>.sig = <stamp>:<key id>:<hex>``, an HMAC-SHA256 over (model, alias, version,
stamp) with the registry key, which the UI does not have. A record whose signature does not verify
is *forged*: readers treat the alias as set around rlops.

The key comes from ``$RLOPS_REGISTRY_KEY`` (set the same value for every process that promotes:
CLI, Airflow workers, the webhook receiver) or, when unset, from ``rlops-data/registry.key``
under the project home, created (mode 0600) on first use — one machine, one key.

Two processes with different keys would each read the other's records as forged and undo the
other's champion. So the signature names its key (the key id: the first 12 hex digits of the key's
sha256, which tells nothing of the key), and the first signed write of a model claims its key id as
the deployment's (registered-model tag ``rlops.registry.key_id``). A process whose key id is not
the deployment's refuses to read or write any alias record (:class:`RegistryKeyMismatch`): it
deletes, moves and re-tags nothing. In the deployment's processes a record that names another key
id, or names theirs and does not verify, was written by hand: forged. A registry signed before key
ids were recorded (``<stamp>:<hex>``) belongs to the key that verifies its records; a process whose
key verifies none of them refuses as well.

Changing the key: remove the tag ``rlops.registry.key_id`` and every ``rlops.alias.*`` tag of the
model; the next check adopts the champion in place as rlops' own and the new key claims the model.

The champion history (``rlops.champion.history``, the versions rollback may return to) is signed
the same way (``rlops.champion.history.sig``, over the model and the history's JSON): a history
edited in the UI names versions that never passed a gate, and rollback would make one champion.

What a signature cannot stop: the replay of a signature rlops once wrote for the same model,
alias and version (that move was rlops' own); rollback clears ``previous`` and promotion
re-signs, so a stale pair names a version that already passed the gates.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from rlops.common.config import home
from rlops.common.errors import UserError
from rlops.registry import tags as K

if TYPE_CHECKING:
    from rlops.registry.client import Tracker

KEY_ENV = "RLOPS_REGISTRY_KEY"
KEY_FILE = Path("rlops-data") / "registry.key"
KEY_ID_LEN = 12
# Signed in the alias's place: MLflow refuses '#' and '.' in alias names, so no signature of an
# alias move can be passed off as one of the history, nor the other way round.
HISTORY_SUBJECT = "#champion.history"
RecordState = Literal["absent", "verified", "forged"]


class RegistryKeyMismatch(UserError):
    """This process's registry key is not the one the deployment signs its alias records with."""


class Signature(NamedTuple):
    stamp: str
    key_id: str | None  # None: written before signatures named their key
    mac: str


def key_path() -> Path:

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


def key_id(key: bytes | None = None) -> str:
    """The public name of a registry key (default: this process's): 12 hex digits of its sha256."""
    return hashlib.sha256(registry_key() if key is None else key).hexdigest()[:KEY_ID_LEN]


def _mac(key: bytes, name: str, alias: str, version: str, stamp: str) -> str:
    msg = "\n".join((name, alias, version, stamp)).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def _same_mac(expected: str, given: str) -> bool:
    # compare_digest raises on non-ASCII text, and a hand-written tag may hold any
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape"))


def _signature(key: bytes, name: str, subject: str, value: str) -> str:
    stamp = str(time.time_ns())
    return f"{stamp}:{key_id(key)}:{_mac(key, name, subject, value, stamp)}"


def parse_signature(sig: str | None) -> Signature | None:
    """``<stamp>:<key id>:<hex>`` (or the older ``<stamp>:<hex>``); None when malformed."""
    parts = (sig or "").split(":")
    if len(parts) == 3 and all(parts):
        return Signature(parts[0], parts[1], parts[2])
    if len(parts) == 2 and all(parts):
        return Signature(parts[0], None, parts[1])
    return None


def _signatures(tags: Mapping[str, str]) -> dict[str, Signature | None]:
    """alias → its parsed signature, for every alias record in ``tags``."""
    out: dict[str, Signature | None] = {}
    for k, v in tags.items():
        if k.startswith(K.ALIAS_WRITTEN_PREFIX) and k.endswith(K.ALIAS_SIGNATURE_SUFFIX):
            out[k[len(K.ALIAS_WRITTEN_PREFIX) : -len(K.ALIAS_SIGNATURE_SUFFIX)]] = parse_signature(v)
    return out


def expected_key_id(tags: Mapping[str, str]) -> str | None:
    """The key id the registry's records are signed with: the claim, else a signature's own."""
    claimed = tags.get(K.REGISTRY_KEY_ID)
    if claimed:
        return claimed
    return next((s.key_id for s in _signatures(tags).values() if s is not None and s.key_id), None)


def _verifies(tags: Mapping[str, str], name: str, alias: str, sig: Signature, key: bytes) -> bool:
    version = tags.get(K.alias_written(alias))
    return version is not None and _same_mac(_mac(key, name, alias, str(version), sig.stamp), sig.mac)


def check_key(tags: Mapping[str, str], name: str) -> None:
    """Raise :class:`RegistryKeyMismatch` unless this process signs with the deployment's key
    (``tags``: the registered model's; a model rlops never signed accepts any key)."""
    key = registry_key()
    ours, expected = key_id(key), expected_key_id(tags)
    if expected is None:
        legacy = {a: s for a, s in _signatures(tags).items() if s is not None}
        if not legacy or any(_verifies(tags, name, a, s, key) for a, s in legacy.items()):
            return
        expected = "unrecorded (its records predate key ids and none verifies with this key)"
    elif expected == ours:
        return
    raise RegistryKeyMismatch(
        f"registered model {name!r}: this process's registry key has id {ours}, but rlops' alias "
        f"records there are signed with key id {expected}; set {KEY_ENV} to the deployment's key "
        "(the same value for the CLI, the Airflow workers and the webhook receiver) — nothing was changed"
    )


def require_key(tracker: Tracker, name: str) -> None:
    """:func:`check_key` against the registry's current tags, before anything is moved or tagged."""
    check_key(tracker.model_tags(name), name)


def record_tags(name: str, alias: str, version: str | None, current: Mapping[str, str]) -> dict[str, str]:
    """The registered-model tags that record rlops pointing ``alias`` at ``version`` (None:
    deleted), given the model's ``current`` tags: refused (:class:`RegistryKeyMismatch`) with
    another key than the deployment's; the first signed write also claims the key id."""
    check_key(current, name)
    key = registry_key()
    v = "" if version is None else str(version)
    out = {} if current.get(K.REGISTRY_KEY_ID) else {K.REGISTRY_KEY_ID: key_id(key)}
    out[K.alias_written(alias)] = v
    out[K.alias_signature(alias)] = _signature(key, name, alias, v)
    return out


def record_state(tags: Mapping[str, str], name: str, alias: str) -> RecordState:
    """``absent`` (rlops never recorded this alias), ``verified`` or ``forged``. A process whose key
    is not the deployment's cannot tell the two apart and raises :class:`RegistryKeyMismatch`."""
    check_key(tags, name)
    version, raw = tags.get(K.alias_written(alias)), tags.get(K.alias_signature(alias))
    if version is None and raw is None:
        return "absent"
    sig = parse_signature(raw)
    if version is None or sig is None:
        return "forged"
    key = registry_key()
    if sig.key_id is not None and sig.key_id != key_id(key):  # the deployment's key is ours: hand-written
        return "forged"
    return "verified" if _verifies(tags, name, alias, sig, key) else "forged"


def verified_version(tags: Mapping[str, str], name: str, alias: str) -> str | None:
    """The version rlops last pointed ``alias`` at, when its record verifies; else None."""
    if record_state(tags, name, alias) != "verified":
        return None
    return tags.get(K.alias_written(alias)) or None


def history_tags(name: str, history: Sequence[str], current: Mapping[str, str]) -> dict[str, str]:
    """The registered-model tags that record ``history`` (the former champions rollback may return
    to, oldest first) as rlops' own, given the model's ``current`` tags; the signature last."""
    check_key(current, name)
    key = registry_key()
    value = json.dumps([str(v) for v in history])
    out = {} if current.get(K.REGISTRY_KEY_ID) else {K.REGISTRY_KEY_ID: key_id(key)}
    out[K.CHAMPION_HISTORY] = value
    out[K.CHAMPION_HISTORY_SIGNATURE] = _signature(key, name, HISTORY_SUBJECT, value)
    return out


def verified_history(tags: Mapping[str, str], name: str) -> list[str] | None:
    """The champion history rlops last recorded, oldest first, when its signature verifies; None
    when there is none or it was written (or edited) outside rlops."""
    check_key(tags, name)
    value, sig = tags.get(K.CHAMPION_HISTORY), parse_signature(tags.get(K.CHAMPION_HISTORY_SIGNATURE))
    if value is None or sig is None:
        return None
    key = registry_key()
    if sig.key_id != key_id(key) or not _same_mac(_mac(key, name, HISTORY_SUBJECT, value, sig.stamp), sig.mac):
        return None
    try:
        history = json.loads(value)
    except ValueError:
        return None
    return [str(v) for v in history] if isinstance(history, list) else None

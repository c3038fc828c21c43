"""Trace every decision of a production agent into the rlops landing zone.

Two pieces: a :class:`Tracer` that buffers trace records and writes them as immutable
JSON-lines files (a local folder or an ``s3://`` prefix), and the :func:`rollout` decorator
that turns one call of your episode function into traced steps (:mod:`rlops.agent_sdk.rollout`).

Quick start::

    from rlops.agent_sdk import Tracer, current_episode, rollout

    tracer = Tracer("s3://acme-traces/landing", flush_every=500)   # or a local folder

    @rollout(tracer, scenario="credit_approval", policy_version="rules", source="live")
    def handle_application(app_id: str, observer, executor, policy) -> str:
        state = observer.observe()                      # traced: the state of this step
        while True:
            decision = policy.decide(state)             # e.g. rlops.agent_sdk.policy_client
            current_episode().annotate(**decision.trace_fields())  # serving version, group, logp, fallback, …
            result = executor.execute(decision.action, state)   # traced: one step
            if result.done:
                return decision.action
            state = observer.observe()

``observer`` and ``executor`` (found by parameter name, or by the ``observer=``/``executor=``
arguments of :func:`rollout`) are wrapped for the duration of the call: each ``execute``
is one step, recorded with the trace and episode ids, the step index, the UTC timestamp,
the flattened state (``state.user_profile.credit_score``), the action, latency and error,
whatever was passed to :meth:`Episode.annotate` since the previous step, and — with a
:class:`~rlops.agent_sdk.interfaces.RewardProvider` — its score once the next state is known, as the
reward hook's breakdown component ``hook:<name>`` (``reward_total`` stays the pack's reward).
The last step gets ``done=True`` (``truncated=True`` when the function raised). Without
an executor, call :meth:`Episode.step` yourself; a function that takes an ``episode``
parameter receives the :class:`Episode`.

Files: ``<landing>/scenario=<s>/date=YYYY-MM-DD/hour=HH/<time>Z-<host>-<pid>-<seq>.jsonl``,
one per scenario per flush, written atomically (a temp file renamed into place locally,
one ``put_object`` on S3). Flushes happen when ``flush_every`` records are buffered, when
the oldest buffered record is ``flush_interval_s`` old (checked as records arrive), on
:meth:`Tracer.flush`/:meth:`Tracer.close`, at interpreter exit, and when a ``with tracer:``
block ends. A crash loses at most the records not yet flushed, never a written file.
Late outcomes (a default months later, a click minutes later): :meth:`Tracer.outcome` buffers one
outcome line of an episode, written like trace files under ``<landing>/_outcomes/scenario=<s>/…``
(``rlops outcome capture`` reads them; docs/outcomes.md).
This module needs only the standard library (and boto3 for ``s3://``).
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_SEQ = itertools.count()  # process-wide, so two tracers never pick the same file name
_TMP_PREFIX = ".tmp-"
_LIVE: weakref.WeakSet[Tracer] = weakref.WeakSet()
_FORK_HOOK = False
#: A buffered record's marker that it is an outcome line (removed when written).
_KIND = "__rlops_kind__"
#: The landing folder of outcome lines, under the landing root (rlops.trace_store.outcomes.OUTCOME_LANDING).
OUTCOME_FOLDER = "_outcomes"


class TraceWriteError(RuntimeError):
    """A flush could not write its file; the records stay buffered for the next flush."""


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays, without importing numpy
        return value.tolist()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def flatten_state(state: Mapping[str, Any], prefix: str = "state") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"state.a.b": 1}`` (the trace column names)."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        name = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            out.update(flatten_state(value, name))
        else:
            out[name] = value
    return out


#: ``error`` texts that mean no error (a row's ``error`` is free text on live rows, a bool on sandbox rows).
NO_ERROR_TEXTS = frozenset({"", "false", "0", "none", "nan", "null", "<na>"})


def is_error(error: Any) -> bool:
    """Whether a step's ``error`` value says its action failed, as the pipeline reads the trace
    column (``rlops.trace_store.states.error_flags``): the sandbox's ``episode.error`` of the next step."""
    if error is None or isinstance(error, bool):
        return bool(error)
    return str(error).strip().lower() not in NO_ERROR_TEXTS


def mask_text(mask: Any) -> Any:
    """An action mask as stored: one '0'/'1' character per action, in scenario order."""
    if isinstance(mask, str) or mask is None:
        return mask
    values = mask.tolist() if hasattr(mask, "tolist") else list(mask)
    return "".join("1" if v else "0" for v in values)


def _now() -> datetime:
    return datetime.now(UTC)


class Tracer:
    """Buffers trace records and writes them to the landing zone as JSON-lines files.

    ``landing_uri``: a local folder (``/var/lib/agent/landing`` or ``file:///…``) or
    ``s3://bucket/prefix``; ``flush_every``: records per file; ``flush_interval_s``: flush
    when the oldest buffered record is this old (``None``: only by count);
    ``max_buffer``: if writes keep failing, the oldest records beyond this many are
    dropped (and counted in :attr:`dropped`) rather than let tracing exhaust the agent's
    memory; ``endpoint_url``: an S3-compatible endpoint (default: ``RLOPS_S3_ENDPOINT_URL``
    or boto3's own configuration); ``exporters``: objects with ``export(record)`` (and optionally
    ``flush()``) that also receive every record, e.g.
    :class:`rlops.agent_sdk.mlflow_tracing.MlflowTraceExporter` (decisions as MLflow traces).
    """

    def __init__(
        self,
        landing_uri: str | os.PathLike[str],
        *,
        flush_every: int = 1000,
        flush_interval_s: float | None = 60.0,
        max_buffer: int = 100_000,
        endpoint_url: str | None = None,
        host: str | None = None,
        fsync: bool = True,
        exporters: Sequence[Any] = (),
    ) -> None:
        if flush_every < 1 or max_buffer < flush_every:
            raise ValueError(
                f"Tracer: need 1 <= flush_every <= max_buffer, got flush_every={flush_every}, max_buffer={max_buffer}"
            )
        uri = str(landing_uri)
        if uri.startswith("s3://"):
            bucket, _, prefix = uri[5:].partition("/")
            if not bucket:
                raise ValueError(f"Tracer: {uri!r} has no bucket; expected s3://bucket/prefix")
            self._bucket, self._prefix, self._root = bucket, prefix.strip("/"), None
        elif "://" in uri and not uri.startswith("file://"):
            raise ValueError(
                f"Tracer: unsupported landing zone {uri!r}; expected a local folder, file:///path or s3://bucket/prefix"
            )
        else:
            path = uri[len("file://") :] if uri.startswith("file://") else uri
            self._root = Path(path).expanduser().resolve()
            self._bucket = self._prefix = None  # type: ignore[assignment]  # a local root has no bucket or prefix
        self.landing_uri = uri
        self.flush_every, self.flush_interval_s, self.max_buffer = (flush_every, flush_interval_s, max_buffer)
        self.endpoint_url = endpoint_url or os.environ.get("RLOPS_S3_ENDPOINT_URL") or None
        self.host = re.sub(r"[^A-Za-z0-9_.]", "_", host or socket.gethostname())[:64]
        self.fsync = fsync
        self.exporters = list(exporters)
        self.dropped = 0
        self.files_written: list[str] = []
        self._buffer: list[dict[str, Any]] = []
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._client: Any = None
        self._closed = False
        atexit.register(self._at_exit)
        _register_fork_hook(self)

    # ------------------------------------------------------------------ buffering
    def record(self, rec: Mapping[str, Any], *, export: bool = True) -> None:
        """Buffer one trace record (a flat dict of trace columns); may trigger a flush.

        A failed automatic flush is logged and its records kept, so a storage outage never
        breaks the agent itself."""
        if self._closed:
            raise RuntimeError("Tracer.record after close(); create a new Tracer")
        with self._lock:
            self._buffer.append(dict(rec))
            if self._oldest is None:
                self._oldest = time.monotonic()
            due = len(self._buffer) >= self.flush_every or (
                self.flush_interval_s is not None and time.monotonic() - self._oldest >= self.flush_interval_s
            )
        for exporter in self.exporters if export else ():  # outside the lock: an export may take a network round trip
            exporter.export(rec)  # exporters log their own failures; they never raise
        if due:
            try:
                self.flush()
            except TraceWriteError as exc:
                log.warning("%s", exc)

    def __len__(self) -> int:
        return len(self._buffer)

    def outcome(
        self,
        episode_id: str,
        /,
        *,
        scenario: str,
        at: datetime | None = None,
        components: Mapping[str, float] | None = None,
        **values: float,
    ) -> None:
        """Buffer a late outcome of ``episode_id`` (a traced episode of ``scenario``): named ``values``
        (``default=1``; the pack maps them to reward) and optional explicit reward ``components``,
        at time ``at`` (default: now, UTC). Written with the next flush, beside the trace files.

        A call that cannot make a valid outcome line raises ``ValueError`` at once (nothing is buffered)."""
        if not isinstance(episode_id, str) or not episode_id.strip():
            raise ValueError(f"Tracer.outcome: episode_id {episode_id!r}: expected the traced episode's id")
        named = {"values": dict(values), "components": dict(components or {})}
        if not any(named.values()):
            raise ValueError(f"Tracer.outcome({episode_id!r}): expected at least one value or component")
        for kind, items in named.items():
            for name, value in items.items():
                number = value.item() if hasattr(value, "item") else value
                if not isinstance(number, (int, float)) or number != number or number in (float("inf"), float("-inf")):
                    raise ValueError(f"Tracer.outcome({episode_id!r}): {kind}.{name}={value!r} is not a finite number")
                items[name] = number
        when = at or _now()
        if when.tzinfo is None:
            raise ValueError(f"Tracer.outcome({episode_id!r}): at={when!r} has no time zone; pass a UTC time")
        line: dict[str, Any] = {"episode_id": episode_id, "ts": when.astimezone(UTC).isoformat(), "scenario": scenario}
        line.update({kind: items for kind, items in named.items() if items})
        self.record({**line, _KIND: "outcome"}, export=False)

    def flush(self) -> list[str]:
        """Write every buffered record now (one file per scenario); returns the file URIs.

        Raises :class:`TraceWriteError` if a write fails; the unwritten records stay
        buffered."""
        with self._lock:
            pending, self._buffer, self._oldest = self._buffer, [], None
        if not pending:
            return []
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rec in pending:
            folder = OUTCOME_FOLDER if rec.get(_KIND) == "outcome" else ""
            groups.setdefault((folder, str(rec.get("scenario") or "unknown")), []).append(rec)
        written: list[str] = []
        items = list(groups.items())
        for i, ((under, scenario), recs) in enumerate(items):
            try:
                written.append(self._write(scenario, recs, under))
            except Exception as exc:  # noqa: BLE001 - any write failure keeps the records
                self._requeue([r for _, rest in items[i:] for r in rest])
                self.files_written.extend(written)
                raise TraceWriteError(
                    f"Tracer: writing {len(recs)} trace record(s) of scenario {scenario!r} to "
                    f"{self.landing_uri} failed ({type(exc).__name__}: {exc}); the records "
                    "are kept and retried at the next flush"
                ) from exc
        self.files_written.extend(written)
        return written

    def _requeue(self, recs: list[dict[str, Any]]) -> None:
        with self._lock:
            self._buffer = recs + self._buffer
            overflow = len(self._buffer) - self.max_buffer
            if overflow > 0:
                del self._buffer[:overflow]
                self.dropped += overflow
                log.error("Tracer: buffer over max_buffer=%d; dropped the %d oldest records", self.max_buffer, overflow)
            if self._buffer and self._oldest is None:
                self._oldest = time.monotonic()

    # ------------------------------------------------------------------ writing
    def _name(self, scenario: str, under: str = "") -> tuple[str, str]:
        now = _now()
        folder = f"scenario={re.sub(r'[^A-Za-z0-9_.-]', '_', scenario)}/date={now:%Y-%m-%d}/hour={now:%H}"
        folder = f"{under}/{folder}" if under else folder
        return folder, f"{now:%Y%m%dT%H%M%S%f}Z-{self.host}-{os.getpid()}-{next(_SEQ):06d}.jsonl"

    def _write(self, scenario: str, recs: list[dict[str, Any]], under: str = "") -> str:
        lines = ({k: v for k, v in r.items() if k != _KIND} for r in recs)
        payload = "".join(json.dumps(r, default=_json_default, separators=(",", ":")) + "\n" for r in lines).encode(
            "utf-8"
        )
        folder, name = self._name(scenario, under)
        if self._root is None:
            key = "/".join(p for p in (self._prefix, folder, name) if p)
            self._s3().put_object(Bucket=self._bucket, Key=key, Body=payload)  # atomic on S3
            return f"s3://{self._bucket}/{key}"
        target = self._root / folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f"{_TMP_PREFIX}{name}.{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(payload)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
            os.replace(tmp, target)  # readers see the whole file or none of it
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return target.as_uri()

    def _s3(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                config=Config(
                    retries={"max_attempts": 5, "mode": "standard"},
                    s3={"addressing_style": "path"} if self.endpoint_url else None,
                ),
            )
        return self._client

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Flush what is buffered and stop accepting records (idempotent)."""
        if self._closed:
            return
        for exporter in self.exporters:
            getattr(exporter, "flush", lambda: None)()
        try:
            self.flush()
        finally:
            self._closed = True
            atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - never turn interpreter exit into a crash
            log.error("Tracer: final flush at exit failed: %s", exc)

    def _forget_after_fork(self) -> None:
        # A forked child inherits the parent's buffer; the parent will write those records.
        self._buffer, self._oldest, self._client = [], None, None
        self._lock = threading.RLock()

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _forget_live_after_fork() -> None:
    for t in list(_LIVE):
        t._forget_after_fork()


def _register_fork_hook(tracer: Tracer) -> None:
    global _FORK_HOOK
    _LIVE.add(tracer)
    if not _FORK_HOOK and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_live_after_fork)
        _FORK_HOOK = True

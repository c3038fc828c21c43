"""A small landing zone for capture probes: one scenario, one hour, lines written as given."""

from __future__ import annotations

import functools
import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SCENARIO = "credit_approval"
ACTIONS = ["screen", "fraud_check", "approve", "reject"]
FIELDS = [
    ("user_profile.credit_score", "int", 300, 850, None),
    ("application.channel", "enum", None, None, ["web", "branch"]),
]
START = datetime(2026, 1, 5, 10, tzinfo=UTC)
END = START + timedelta(hours=1)


@functools.lru_cache(maxsize=1)
def contract() -> Any:
    from rlops.data_contracts.contracts import trace_contract

    return trace_contract(SCENARIO, ACTIONS, FIELDS)


def record(step: int = 0, episode: str = "ep-1", ts: str = "2026-01-05T10:01:00Z", **over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "trace_id": f"{episode}-{step}",
        "episode_id": episode,
        "step": step,
        "ts": ts,
        "scenario": SCENARIO,
        "source": "live",
        "policy_version": "champion-3",
        "state": {"user_profile": {"credit_score": 640}, "application": {"channel": "web"}},
        "action": "screen",
        "action_mask": "1100",
        "logp": -0.2,
        "done": False,
    }
    rec.update(over)
    return rec


def line(step: int = 0, episode: str = "ep-1", **over: Any) -> str:
    return json.dumps(record(step, episode, **over))


def write_file(tmp: Path, lines: list[str | bytes], name: str = "", minute: int = 5, gz: bool = False) -> Path:
    when = START + timedelta(minutes=minute)
    folder = tmp / "landing" / f"scenario={SCENARIO}" / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{when:%Y%m%dT%H%M%S%f}Z-agent-1-000000.jsonl")
    data = b"\n".join(x if isinstance(x, bytes) else x.encode("utf-8") for x in lines) + b"\n"
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def capture(tmp: Path, **kw: Any) -> Any:
    from rlops.pipeline_steps.capture.core import capture_landing_zone
    from rlops.storage.backend import Storage

    return capture_landing_zone(
        Storage(f"file://{tmp}", retries=1),
        f"file://{tmp / 'landing'}",
        f"file://{tmp / 'traces'}",
        SCENARIO,
        contract(),
        START,
        END,
        **kw,
    )


def reasons(tmp: Path) -> list[str]:
    from rlops.storage.backend import Storage

    q = tmp / "quarantine"
    if not q.is_dir():
        return []
    return Storage(f"file://{tmp}").read_parquet(f"file://{q}")["quarantine_reason"].tolist()


def manifest(tmp: Path) -> dict[str, Any]:
    found = sorted((tmp / "traces" / "_manifests").rglob("*.json"))
    return json.loads(found[-1].read_text()) if found else {}


def check_counts(res: Any, lines_in: int, accepted: int) -> tuple[str, str] | None:
    """Nothing lost: every line is a row, every row accepted or quarantined, the good ones kept."""
    if res.rows_in != lines_in:
        return "lost", f"{lines_in} lines written, {res.rows_in} rows in"
    if res.rows_in != res.rows_accepted + res.rows_quarantined:
        return "lost", f"{res.rows_in} in != {res.rows_accepted} accepted + {res.rows_quarantined} quarantined"
    if res.rows_accepted != accepted:
        return (
            "accepted" if res.rows_accepted > accepted else "lost",
            f"{res.rows_accepted} rows accepted, expected {accepted}",
        )
    return None

"""A trace store holding a file that is no parquet (a zero-byte file left by a crashed writer, a
garbage file) in an hour no page asks about: the decision map, the episode and the shadow page
still answer from the rest of the store, and the console's log names the skipped file in a warning
(never a traceback)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

S = "credit_approval"


def _write_traces(home: Path) -> list[str]:
    """Real rows of the credit pack, simulated by the rule engine; the files written."""
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(S, "20261201T0900")
    capture_step(ctx, CaptureRequest(simulate=True, profile="live", episodes=12))
    files = sorted((home / "data").rglob("traces/**/*.parquet"))
    assert files, "the capture wrote no trace file"
    return [str(f) for f in files]


def _client() -> Any:
    from fastapi.testclient import TestClient

    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    return TestClient(create_app(ProjectData(registry_ttl_s=0.0), mlflow_ui="http://127.0.0.1:5000"))


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_an_unreadable_file_in_another_hour_is_skipped_with_a_warning(
    rlops_home: Path, engine: str, caplog: pytest.LogCaptureFixture
) -> None:
    import yaml

    params_path = rlops_home / "params.yaml"
    params = yaml.safe_load(params_path.read_text())
    params.setdefault("trace_store", {})["engine"] = engine
    params_path.write_text(yaml.safe_dump(params))
    good = _write_traces(rlops_home)
    rows = pd.read_parquet(good[0])
    trace_id, version = str(rows["trace_id"].iloc[0]), str(rows["policy_version"].iloc[0])
    other_hour = Path(good[0]).parent.parent.parent / "date=2026-11-30" / "hour=05"
    other_hour.mkdir(parents=True)
    empty, garbage = other_hour / "part-empty-00000.parquet", other_hour / "part-garbage-00000.parquet"
    empty.write_bytes(b"")
    garbage.write_bytes(b"PAR1 this is not a parquet file at all " * 10)

    client = _client()
    with caplog.at_level(logging.WARNING):
        answers = {
            "map": client.get(f"/s/{S}/map", params={"version": version}),
            "episode": client.get(f"/s/{S}/episode/{trace_id}"),
            "shadow": client.get(f"/s/{S}/shadow"),
        }
    for page, r in answers.items():
        assert r.status_code == 200, f"{page}: {r.status_code} {r.text[-500:]}"
    assert trace_id in answers["episode"].text
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert empty.name in warned and garbage.name in warned
    assert not [r for r in caplog.records if r.exc_info], "a traceback reached the console's log"


def test_the_reader_skips_only_the_unreadable_file(rlops_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The trace store's reader itself: every read (rows, counts, episode lookups, SQL) serves the
    readable files and names the unreadable one once."""
    from rlops.pipeline_steps.infra.context import StepContext

    good = _write_traces(rlops_home)
    bad = Path(good[0]).parent / "part-zero-00000.parquet"
    bad.write_bytes(b"")
    ctx = StepContext.create(S, "20261201T0900")
    reader, uri = ctx.traces.reader, ctx.traces.scenario_uri(S)
    expected = sum(len(pd.read_parquet(f)) for f in good)
    with caplog.at_level(logging.WARNING):
        assert len(reader.read(uri)) == expected
        assert reader.count(uri) == expected
        assert sum(reader.count_by(uri, "policy_version").values()) == expected
        assert int(reader.query(uri, "SELECT count(*) AS n FROM traces")["n"].iloc[0]) == expected
    assert bad.name in caplog.text

"""The capture's typed result: rows in = accepted + quarantined is kept by construction, and its
JSON carries only the fields of the source that captured."""

from __future__ import annotations

import pytest

from rlops.pipeline_steps.capture.summary import CaptureSummary

INTERVAL = {"scenario": "s", "run_key": "20260105T1000", "interval": ["a", "b"], "dry_run": False}


def test_a_summary_that_loses_rows_cannot_be_built() -> None:
    with pytest.raises(RuntimeError, match="capture lost rows: 5 in, 3 accepted, 1 quarantined"):
        CaptureSummary(**INTERVAL, source="landing_zone", rows_in=5, rows_accepted=3, rows_quarantined=1, partitions=[])


def test_the_json_carries_the_fields_of_its_own_source() -> None:
    landing = CaptureSummary(
        **INTERVAL,
        source="landing_zone",
        rows_in=3,
        rows_accepted=2,
        rows_quarantined=1,
        partitions=[],
        files_skipped=[],
    ).as_dict()
    assert landing["files_skipped"] == [] and "policy_version" not in landing and "manifest_uri" not in landing
    simulated = CaptureSummary(
        **INTERVAL,
        source="simulation:live",
        rows_in=2,
        rows_accepted=2,
        rows_quarantined=0,
        partitions=["p"],
        policy_version="rules",
        episodes=1,
        sample_rate=1.0,
    ).as_dict()
    assert simulated["policy_version"] == "rules" and "files_skipped" not in simulated
    assert simulated["alerts"] == [] and simulated["interval"] == ["a", "b"]

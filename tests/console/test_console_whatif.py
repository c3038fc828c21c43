"""The console's reward what-if: a form checked at once (a bad change is refused and never queued),
a background job with a status page, results browsable after a restart; a POST from another
origin, or to any other page, is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rlops.console.app import create_app
from rlops.console.data import ProjectData
from rlops.console.whatif_jobs import WhatIfJobs, project_jobs, split_assignments
from rlops.whatif.run import WhatIfSettings

S = "credit_approval"
ORIGIN = {"origin": "http://testserver"}
TINY = WhatIfSettings(episodes=300, timesteps=16_384, clusters=4)


@pytest.fixture
def console(rlops_home: Path) -> tuple[TestClient, WhatIfJobs, ProjectData]:
    data = ProjectData()
    jobs = project_jobs(data, TINY)
    return TestClient(create_app(data, whatif_jobs=jobs)), jobs, data


def test_split_assignments() -> None:
    assert split_assignments(" compliance=0.62, risk=1.2\nservice=1 ") == ["compliance=0.62", "risk=1.2", "service=1"]
    assert split_assignments("  ") == []


def test_a_what_if_runs_in_the_background_and_stays_browsable(console: Any) -> None:
    client, jobs, data = console
    assert "No what-if yet" in client.get(f"/s/{S}/whatif").text
    resp = client.post(
        f"/s/{S}/whatif", data={"set": "compliance=3", "param": ""}, headers=ORIGIN, follow_redirects=False
    )
    assert resp.status_code == 303
    job_url = resp.headers["location"]
    assert job_url.startswith(f"/s/{S}/whatif/")
    jobs.wait()
    page = client.get(job_url).text
    assert 'id="whatif-status">done' in page, page[-2000:]
    for text in ("compliance 1.0 → 3.0", "unlisted_rejection_rate", "return under the changed reward", "Decision map"):
        assert text in page
    # a restarted console (new jobs object, same folder) lists and shows it
    again = TestClient(create_app(data, whatif_jobs=project_jobs(data, TINY)))
    assert job_url in again.get(f"/s/{S}/whatif").text and "done" in again.get(job_url).text


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"set": "speed=1"}, "has no objective"),
        ({"set": "compliance=nan"}, "finite number"),
        ({"param": "LOW_SCORE_CAP_MULTIPLE=9"}, "declared range"),
        ({}, "nothing to change"),
    ],
)
def test_a_bad_change_is_refused_and_never_queued(console: Any, form: dict[str, str], message: str) -> None:
    client, jobs, _ = console
    resp = client.post(f"/s/{S}/whatif", data=form, headers=ORIGIN)
    assert resp.status_code == 400 and message in resp.text
    assert jobs.list(S) == []


def test_only_the_form_accepts_a_post_and_only_from_the_console_itself(console: Any) -> None:
    client, jobs, _ = console
    assert client.post(f"/s/{S}/whatif", data={"set": "compliance=3"}).status_code == 403  # no origin
    evil = {"origin": "http://evil.example"}
    assert client.post(f"/s/{S}/whatif", data={"set": "compliance=3"}, headers=evil).status_code == 403
    assert client.post(f"/s/{S}/rewards", headers=ORIGIN).status_code == 405
    assert client.put(f"/s/{S}/whatif", headers=ORIGIN).status_code == 405
    assert jobs.list(S) == []
    assert client.get(f"/s/{S}/whatif/0123456789ab").status_code == 404
    assert client.get(f"/s/{S}/whatif/..%2f..%2fx").status_code == 404

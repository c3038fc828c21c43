"""The console's pages over the demo's registry and trace store: content, 404s, auth, read-only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlops.console import aggregates as agg

S = "credit_approval"


def _champion_run(client: Any) -> str:
    m = re.search(
        rf'id="champion-gates" href="/s/{S}/evaluation/([0-9a-f]{{32}})"', client.get(f"/s/{S}/promotion").text
    )
    assert m, "the promotion page links the champion's gate table"
    return m.group(1)


def test_every_page_renders(client: Any) -> None:
    for url in (
        "/",
        f"/s/{S}/map",
        f"/s/{S}/map?version=rules",
        f"/s/{S}/promotion",
        f"/s/{S}/drift",
        f"/s/{S}/rewards",
        f"/s/{S}/rewards/diff?a=v0&b=v1",
        f"/s/{S}/evaluation/{_champion_run(client)}",
    ):
        r = client.get(url)
        assert r.status_code == 200, url
        assert "Traceback" not in r.text


def test_decision_map_defaults_to_the_champion_and_links_episodes(client: Any) -> None:
    page = client.get(f"/s/{S}/map").text
    assert f"served by <b>{S}-policy/1</b>" in page
    assert page.count('class="node"') >= 2 and 'class="edge"' in page
    trace = re.search(rf'href="/s/{S}/episode/([^"]+)"', page).group(1)
    episode = client.get(f"/s/{S}/episode/{trace}").text
    assert "recomputed with credit_approval-policy v1" in episode and "OPS_SLA_v3.2_4.1" in episode


def test_gate_table_and_lineage(client: Any) -> None:
    page = client.get(f"/s/{S}/evaluation/{_champion_run(client)}").text
    for gate in ("mean_return", "segment:elderly", "stress_test"):
        assert gate in page
    promo = client.get(f"/s/{S}/promotion").text
    assert "20261" in promo and "run_key=" in promo  # calibration and data version of v1
    assert "http://127.0.0.1:5000/#/models/credit_approval-policy/versions/1" in promo


def test_reward_diff_shows_the_cap_fix(client: Any) -> None:
    page = client.get(f"/s/{S}/rewards/diff?a=v0&b=v1").text
    assert re.search(r'class="del">-[^<]*5', page) and re.search(r'class="add">\+[^<]*3', page)
    rewards = client.get(f"/s/{S}/rewards").text
    assert "CREDIT_POLICY_v2.1_3.4" in rewards and "pass" in rewards


def test_drift_and_calibration(client: Any) -> None:
    page = client.get(f"/s/{S}/drift").text
    assert "user_profile.age" in page and 'class="drifted"' in page and "closer to live" in page
    assert "Outcome drift" in page  # the calibration test of live rewards, one row per drift check
    # what exploration cost each capture (the demo's capture explored the rule engine's decisions)
    table = re.search(r'<table id="exploration">(.*?)</table>', page, re.DOTALL)
    assert table and "The cost of exploration" in page and re.search(r"<td>[0-9.]+%</td>", table.group(1))


@pytest.mark.parametrize(
    "url",
    [
        "/s/nope/map",
        "/s/..%2Fetc/map",
        f"/s/{S}/episode/no-such-trace",
        f"/s/{S}/episode/%3Cscript%3E",
        f"/s/{S}/map?version=99",
        f"/s/{S}/map?version=%3Cx%3E",
        f"/s/{S}/evaluation/abc",
        f"/s/{S}/evaluation/{'0' * 32}",
        f"/s/{S}/rewards/diff?a=v0&b=v9",
        f"/s/{S}/rewards/diff?a=%27&b=v1",
        "/nothing",
    ],
)
def test_bad_input_is_a_clean_404(client: Any, url: str) -> None:
    r = client.get(url)
    assert r.status_code == 404
    assert "Traceback" not in r.text and 'File "' not in r.text and "<h1>404" in r.text


def test_read_only(client: Any) -> None:
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)(f"/s/{S}/map").status_code == 405


def test_token_required_when_configured(console_app: Any, demo_home: Any) -> None:
    from fastapi.testclient import TestClient

    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    c = TestClient(create_app(ProjectData(), token="s3cret"))
    assert c.get("/").status_code == 401
    assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/", headers={"X-Console-Token": "s3cret"}).status_code == 200
    r = c.get(f"/s/{S}/rewards?token=s3cret", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/s/{S}/rewards"
    assert c.get(f"/s/{S}/rewards").status_code == 200  # the cookie now carries it


def test_cli_refuses_a_public_address_without_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlops.console.cli import resolve_token

    monkeypatch.delenv("RLOPS_CONSOLE_TOKEN", raising=False)
    assert resolve_token("127.0.0.1", None) is None and resolve_token("::1", None) is None
    from rlops.common.errors import UserError

    with pytest.raises(UserError, match="not a loopback address"):
        resolve_token("0.0.0.0", None)
    assert resolve_token("0.0.0.0", "t") == "t"
    monkeypatch.setenv("RLOPS_CONSOLE_TOKEN", "env")
    assert resolve_token("10.0.0.1", None) == "env"


def test_cli_module_is_light() -> None:
    code = (
        "import sys, argparse; import rlops.console.cli as c; p = argparse.ArgumentParser(); "
        "c.add_parser(p.add_subparsers()); "
        "print(','.join(m for m in ('fastapi', 'pandas', 'uvicorn', 'mlflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_aggregates_transitions_and_nearest() -> None:
    import numpy as np
    import pandas as pd

    df = pd.DataFrame(
        {
            "episode_id": ["a", "a", "a", "b", "b"],
            "step": [0, 1, 2, 0, 1],
            "action": ["x", "y", "z", "x", "z"],
            "trace_id": ["t0", "t1", "t2", "u0", "u1"],
        }
    )
    t = agg.transitions(df, np.array([0, 1, 1, 0, 1]))
    got = {(r.source, r.action, r.target): r.count for r in t.itertuples()}
    assert got == {(0, "x", 1): 2, (1, "y", 1): 1, (1, "z", agg.END): 2}
    X = np.array([[0.0, 0.0], [10.0, 10.0], [9.0, 9.5]])
    assert agg.nearest(X, np.array([[10.0, 10.0], [0.0, 0.0]])).tolist() == [1, 0, 0]


def test_a_new_partition_changes_the_digest_and_the_aggregates(demo_home: Any) -> None:
    import shutil

    from rlops.console.data import ProjectData
    from rlops.console.service import TraceViews

    views = TraceViews(ProjectData())
    before = views.overview(S)
    src = Path(before["files"][0][len("file://") :])
    extra = src.parent.parent.parent / "date=2020-01-01" / "hour=0" / src.name
    extra.parent.mkdir(parents=True)
    try:
        shutil.copy(src, extra)
        fresh = TraceViews(ProjectData())
        after = fresh.overview(S)
        assert after["digest"] != before["digest"] and after["rows"] > before["rows"]
        cache = ProjectData().cache_dir(S)
        assert not list(cache.glob(f"overview-{before['digest']}.json"))  # stale aggregates are pruned
    finally:
        shutil.rmtree(extra.parent.parent)

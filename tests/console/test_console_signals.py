"""The reward page shows each signal-driven weight: the value in force, the champion's, and the
values offered (a refused one marked), read-only over storage and the registry."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.signal_store import set_signal

S = "credit_approval"


def test_the_reward_page_shows_the_signal_and_its_history(tmp_path: Path, tmp_tracking: str) -> None:
    from fastapi.testclient import TestClient

    from rlops.common.errors import UserError
    from rlops.console.app import create_app
    from rlops.console.data import ProjectData
    from rlops.console.registry_views import rewards

    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["storage"]["root"] = f"file://{tmp_path / 'data'}"
    params["tracking"]["uri"] = tmp_tracking
    for raw in ("0.2", "0.7", "7"):
        try:
            set_signal(params, "complaint_index", raw)
        except UserError:
            pass  # 7 is refused: 0.7 stays in force
    doc = tmp_path / "data" / "signals" / "complaint_index.json"
    before = doc.read_text()
    data = ProjectData(params)
    view = {f["label"]: f for f in rewards(data, S)["functions"]}
    assert view["v0"]["signals"] == []  # v0 declares no signal weight
    (row,) = view["v1"]["signals"]
    assert (row["signal"], row["objective"], row["value"], row["status"]) == (
        "complaint_index",
        "compliance",
        0.7,
        "last_good",
    )
    assert row["weight_in_force"] == round(1.0 + 0.7 * 0.77, 6) and row["champion_value"] is None
    assert [h["raw"] for h in row["history"]] == ["7", "0.7", "0.2"]  # newest first
    page = TestClient(create_app(data)).get(f"/s/{S}/rewards").text
    assert "Weights that follow a business signal" in page and "complaint_index" in page
    assert "refused: 7.0 is outside the declared range [0, 1]" in page and 'class="spark"' in page
    assert doc.read_text() == before  # read-only

"""The MLflow UI on the demo's store, in a real browser (Playwright driving the Debian Chromium).

``rlops.demo`` runs once with tiny budgets; its gates are loosened (and the sandbox's gates decide
without off-policy evidence) so that its candidate becomes the champion whatever a few thousand PPO
steps learn (this test is about what the UI shows; the
gates have their own tests). Then ``mlflow server`` serves the store and the browser finds: the
pass's parent run with its nested step runs, a dataset on the training run, and the policy version
with the alias ``champion`` and its lineage tags. Screenshots go to ``artifacts/ui/`` (git-ignored).
Run: ``pytest -m slow tests/pipeline_steps/infra/test_mlflow_ui.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT, deep_merge

CHROMIUM = os.environ.get("RLOPS_CHROMIUM", "/usr/bin/chromium")
SHOTS = REPO_ROOT / "artifacts" / "ui"
SCENARIO = "credit_approval"
BUDGETS: dict[str, Any] = {
    "capture": {"episodes": 800},
    "drift": {"baseline_episodes": 800},
    "reward_model": {"pairs": 800, "epochs": 8},
    "train": {"eval_episodes": 400, "checkpoint_every": 1000},
    "stress": {"edge_states": 1000, "gaming_episodes": 500, "policy_episodes": 400},
    "recalibrate": {"check_samples": 2000},
    "demo": {"capture_episodes": 800, "reward_model_pairs": 800, "timesteps": 150_000},
    "ope": {"required": False},  # 800 explored episodes cannot judge the first candidate off-policy
    "evaluate": {
        "episodes": 600,
        "bootstrap_samples": 300,
        "latency_samples": 30,
        "require_stress_test": False,
        "min_improvement": -1000.0,
        "completion_epsilon": 1.0,
        "handling_epsilon": 100.0,
        "takeover_epsilon": 1.0,
        "max_illegal_rate": 1.0,
        "latency_p99_ratio": 1000.0,
        "segment_tolerance": 1000.0,
    },
}

# slow: the demo (even with tiny budgets) takes minutes on a busy 2-core machine; run with -m slow.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set RLOPS_CHROMIUM)",
    ),
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``rlops.demo`` in its own process and project home; returns the tracking DB and run key."""
    home = tmp_path_factory.mktemp("demo-home")
    params = deep_merge(yaml.safe_load((REPO_ROOT / "params.yaml").read_text()), BUDGETS)
    params["storage"]["root"] = f"file://{home / 'data'}"
    params["tracking"]["uri"] = f"sqlite:///{home / 'mlflow.db'}"
    params["tracking"]["artifact_root"] = str(home / "mlartifacts")
    params["label_queue"]["db_url"] = f"sqlite:///{home / 'queue.db'}"
    (home / "params.yaml").write_text(yaml.safe_dump(params))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB", "MLFLOW_TRACKING_URI", "RLOPS_ARTIFACT_ROOT")
    }
    env.update(RLOPS_PARAMS=str(home / "params.yaml"), RLOPS_HOME=str(home), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", f"from rlops import demo; raise SystemExit(demo.run({SCENARIO!r}))"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_key = re.search(r"run key (\d{8}T\d{4})", out.stdout).group(1)  # type: ignore[union-attr]
    return {"db": home / "mlflow.db", "run_key": run_key, "stdout": out.stdout}


@pytest.fixture(scope="module")
def ui(demo_store: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on the demo's store (what `mlflow ui` serves), on a free local port."""
    port = _free_port()
    log = open(tmp_path_factory.mktemp("ui") / "server.log", "w")  # noqa: SIM115 - the server writes to it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{demo_store['db']}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("mlflow server did not start") from None
            time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=15)
    log.close()


@pytest.fixture(scope="module")
def page(ui: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1600, "height": 1000})
        pg.set_default_timeout(90_000)
        yield pg
        browser.close()


def _experiment_id(db: Path) -> str:
    from mlflow import MlflowClient

    return str(MlflowClient(tracking_uri=f"sqlite:///{db}").get_experiment_by_name(SCENARIO).experiment_id)


def test_the_experiment_opens_on_its_training_runs(ui: str, page: Any, demo_store: dict[str, Any]) -> None:
    """MLflow 3.17 opens an experiment on its GenAI overview (0 traces) unless the browser's switch
    says "Model training"; the links rlops gives (console, demo) open the runs in the training view,
    and the experiment carries ``mlflow.experimentKind`` for the UIs that read it."""
    from mlflow import MlflowClient

    from rlops.registry.client import ui_url

    exp = _experiment_id(demo_store["db"])
    tags = MlflowClient(tracking_uri=f"sqlite:///{demo_store['db']}").get_experiment(exp).tags
    assert tags.get("mlflow.experimentKind") == "custom_model_development"
    page.goto(ui_url(ui, f"experiments/{exp}"))
    page.locator("[role=row]").filter(has_text=f"pass · {demo_store['run_key']}").first.wait_for()
    assert "/traces" not in page.url and "/overview" not in page.url, page.url
    page.screenshot(path=str(SHOTS / "00-experiment-default-view.png"), full_page=True)


def test_the_pass_is_a_parent_run_with_its_steps_nested_and_datasets(
    ui: str, page: Any, demo_store: dict[str, Any]
) -> None:
    rk = demo_store["run_key"]
    page.goto(f"{ui}/#/experiments/{_experiment_id(demo_store['db'])}/runs")
    parent = page.locator("[role=row]").filter(has_text=f"pass · {rk}").first
    parent.wait_for()
    # only the pass is a top-level row for this run key: its steps are nested, collapsed
    assert page.locator("[role=row]").filter(has_text=f"train_policy full · {rk}").count() == 0
    parent.locator("button[data-component-id*=runnamecellrenderer]").click()
    steps = [
        "capture",
        "drift",
        "recalibrate",
        "train_reward_model",
        "train_policy full",
        "stress_test v",
        "evaluate v",
        "promote v",
    ]
    for step in steps:
        page.locator("[role=row]").filter(has_text=f"{step}").filter(has_text=f"· {rk}").first.wait_for()
    train = page.locator("[role=row]").filter(has_text=f"train_policy full · {rk}").first
    # the Dataset column (the grid renders a row's pinned name cell and its other cells apart)
    same_row = page.locator(f'[role=row][row-index="{train.get_attribute("row-index")}"]')
    same_row.filter(has_text=f"calibration-{SCENARIO}").first.wait_for()
    page.screenshot(path=str(SHOTS / "runs.png"), full_page=True)

    # the training run's own page: its parent (the pass), its datasets with their context, its tags
    train.get_by_text(f"train_policy full · {rk}").click()
    page.get_by_text("Parent run").first.wait_for()
    page.get_by_role("link", name=f"pass · {rk}").first.wait_for()
    page.get_by_text(re.compile(rf"calibration-{SCENARIO} \([0-9a-f]+\)")).first.wait_for()
    page.get_by_text(re.compile(r"^training$", re.I)).first.wait_for()  # the dataset's context
    page.get_by_text("rlops.run_key", exact=True).first.wait_for()
    page.screenshot(path=str(SHOTS / "train_run.png"), full_page=True)


def test_the_champion_version_with_its_lineage_tags(ui: str, page: Any, demo_store: dict[str, Any]) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{demo_store['db']}")
    version = client.get_model_version_by_alias(f"{SCENARIO}-policy", "champion").version
    page.goto(f"{ui}/#/models/{SCENARIO}-policy/versions/{version}")
    page.get_by_text("champion").first.wait_for()
    for tag in ("reward_fn", "reward_fn_sha256", "calibration_version", "data_version", "train_fingerprint"):
        page.get_by_text(tag, exact=True).first.wait_for()
    page.get_by_text("Gates (").first.wait_for()  # the gate summary in the description
    page.screenshot(path=str(SHOTS / "champion_version.png"), full_page=True)

"""MLflow as the cockpit: one tag vocabulary, one parent run per pass with the step runs nested
under it, datasets as run inputs, the hand-set-champion check, and the promotion DAG trigger."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry import tags as T
from rlops.registry.client import Tracker, policy_model_name
from tests.policy_kit import register_placeholders

SCENARIO = "credit_approval"
NAME = policy_model_name(SCENARIO)


def test_every_rlops_tag_key_is_spelled_in_one_module() -> None:
    """``"rlops.…"`` string literals (other than module and logger names) appear only in
    rlops/registry/tags.py. (agent_sdk names its span attributes itself: it is installed in
    agents without the rest of rlops, and they are not tags.)"""
    pattern = re.compile(r"""["']rlops\.[a-z_]""")
    module = re.compile(
        r"""["']rlops\.(cli|demo|model|agent_sdk|sandbox|common|pipeline_steps|console|integrations|whatif|pack_init|stack)\b"""
    )
    files = [
        f
        for f in (REPO_ROOT / "rlops").rglob("*.py")
        if not (f.name == "tags.py" and f.parent.name == "registry") and "agent_sdk" not in f.parts
    ]
    offenders = [
        f"{f.relative_to(REPO_ROOT)}:{i}: {line.strip()}"
        for f in [*files, *(REPO_ROOT / "dags").rglob("*.py")]
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if pattern.search(module.sub("", line))
    ]
    assert not offenders, "tag keys spelled outside registry/tags.py:\n" + "\n".join(offenders)


def _ctx(run_key: str, dag_run_id: str | None = None) -> StepContext:
    ctx = StepContext.create(SCENARIO, run_key)
    if dag_run_id:
        ctx.dag_run_id = dag_run_id
    return ctx


def test_step_runs_of_one_pass_nest_under_one_parent(tmp_tracking: str, tmp_storage_root: str) -> None:
    from rlops.pipeline_steps.infra.pass_run import step_run

    # Each context has its own Tracker, as separate Airflow task processes do.
    with step_run(_ctx("20261130T0500", "scheduled__2026-11-30T05:00"), T.CAPTURE) as cap:
        cap.log_metrics({"rows_in": 10.0}, step=0)
    with step_run(_ctx("20261130T0500", "scheduled__2026-11-30T05:00"), T.TRAIN_POLICY, label="full") as tr:
        pass
    with step_run(_ctx("20261130T0600"), T.CAPTURE):
        pass
    with pytest.raises(RuntimeError), step_run(_ctx("20261130T0500"), T.EVALUATE, label="v3"):
        raise RuntimeError("boom")

    c = Tracker(tmp_tracking, SCENARIO).client
    exp = c.get_experiment_by_name(SCENARIO).experiment_id
    parents = c.search_runs([exp], f"tags.`{T.PASS}` = 'true'")
    assert sorted(p.data.tags[T.RUN_KEY] for p in parents) == ["20261130T0500", "20261130T0600"]
    parent = next(p for p in parents if p.data.tags[T.RUN_KEY] == "20261130T0500")
    assert parent.info.run_name == "pass · 20261130T0500"
    assert parent.data.tags[T.DAG_RUN_ID] == "scheduled__2026-11-30T05:00"
    assert parent.info.status == "FAILED"  # one of its steps failed
    children = c.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    names = sorted(r.info.run_name for r in children)
    assert names == [
        "capture · 20261130T0500",
        "evaluate v3 · 20261130T0500",
        "train_policy full · 20261130T0500",
    ]
    train = c.get_run(tr.run_id)
    assert train.data.tags[T.STEP] == T.TRAIN_POLICY and train.data.tags[T.DAG_RUN_ID].startswith("scheduled__")


def test_partitions_and_calibrations_are_mlflow_datasets(tmp_tracking: str, tmp_storage_root: str) -> None:
    from rlops.pipeline_steps.infra.datasets import TRAINING, calibration_dataset, parquet_dataset
    from rlops.pipeline_steps.infra.pass_run import step_run
    from rlops.registry.datasets import log_dataset_inputs

    ctx = _ctx("20261130T0700")
    part = ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=07")
    ctx.storage.write_parquet(f"{part}/part-a.parquet", pd.DataFrame({"step": [0, 1, 2], "action": ["a", "b", "c"]}))
    ctx.storage.write_parquet(f"{part}/part-b.parquet", pd.DataFrame({"step": [3], "action": ["d"]}))
    cal_uri = ctx.uri("calibrations", SCENARIO, "20261130T0700.json")
    ctx.storage.write_json(cal_uri, {"fields": {"user_profile.age": {}}, "fit": {"rows": 4}})
    traces = parquet_dataset(ctx.storage, part, "traces-credit_approval")
    assert traces is not None and traces.rows == 4 and traces.files == 2
    assert dict(traces.schema) == {"step": "long", "action": "string"}
    assert parquet_dataset(ctx.storage, ctx.uri("traces", "nothing-here"), "x") is None
    with step_run(ctx, T.TRAIN_POLICY) as run:
        log_dataset_inputs(
            run, [traces, calibration_dataset(ctx.storage, cal_uri, "calibration-credit_approval"), None], TRAINING
        )
    inputs = ctx.tracker.client.get_run(run.run_id).inputs.dataset_inputs
    by_name = {d.dataset.name: d for d in inputs}
    assert set(by_name) == {"traces-credit_approval", "calibration-credit_approval"}
    d = by_name["traces-credit_approval"]
    assert json.loads(d.dataset.source)["uri"] == part and json.loads(d.dataset.profile)["num_rows"] == 4
    assert d.dataset.source_type == "file" and {t.key: t.value for t in d.tags}["mlflow.data.context"] == TRAINING
    assert json.loads(d.dataset.schema)["mlflow_colspec"][0] == {"name": "step", "type": "long"}
    # same bytes, same digest: logging the partition again is the same MLflow dataset
    assert parquet_dataset(ctx.storage, part, "traces-credit_approval").digest == traces.digest


def test_hand_set_champion_is_reverted_with_the_reason(tmp_tracking: str, tmp_storage_root: str) -> None:
    from rlops.pipeline_steps.promotion.flow import check_champion

    ctx = StepContext.create(SCENARIO, "20261130T0800", overrides={"promotion": {"manual_champion": "revert"}})
    v1, v2 = register_placeholders(ctx, 2)
    ctx.tracker.set_alias(NAME, "champion", v1)  # rlops' own move
    assert check_champion(ctx).action == "none"
    ctx.tracker.client.set_registered_model_alias(NAME, "champion", v2)  # by hand, around rlops
    res = check_champion(ctx)
    assert res.action == "reverted" and res.hand_set == v2 and res.champion == v1
    assert ctx.tracker.get_alias(NAME, "champion") == v1
    tags = ctx.tracker.model_version_tags(NAME, v2)
    assert tags[T.MANUAL_CHAMPION] == "reverted" and f"set to v{v2} outside rlops" in tags[T.MANUAL_CHAMPION_REASON]
    # a champion from before the bookkeeping (no rlops.alias.champion tag at all) is adopted
    other = StepContext.create("other_scenario", "20261130T0800")
    with other.tracker.start_run("fake") as run:
        run.log_text("w", "policy_model/w.txt")
        v = other.tracker.register_model(run.run_id, "policy_model", "other_scenario-policy")
    other.tracker.client.set_registered_model_alias("other_scenario-policy", "champion", v)
    assert check_champion(other).action == "adopted"
    assert other.tracker.alias_written_by_rlops("other_scenario-policy", "champion") == v
    with pytest.raises(ValueError, match="manual_champion"):
        check_champion(
            StepContext.create(SCENARIO, "20261130T0800", overrides={"promotion": {"manual_champion": "ignore"}})
        )


def test_distributed_mode_triggers_the_promotion_dag(
    tmp_tracking: str, tmp_storage_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A challenger set in the UI starts the ``promote`` DAG through Airflow 3's REST API."""
    from rlops.pipeline_steps.promotion.webhook_events import handle_event
    from rlops.pipeline_steps.promotion.webhook_settings import AIRFLOW, WebhookSettings

    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    class Airflow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, dict(self.headers), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"dag_run_id": "manual__2026-11-30T09:00:00"}).encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Airflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ctx = StepContext.create(SCENARIO, "20261130T0900")
    (v1,) = register_placeholders(ctx, 1)
    monkeypatch.setenv("RLOPS_WEBHOOK_SECRET", "x")
    monkeypatch.setenv("RLOPS_AIRFLOW_TOKEN", "tok")
    params = {
        **ctx.params,
        "promotion": {
            "webhook": {"mode": AIRFLOW, "dag_id": "promote", "airflow_url": f"http://127.0.0.1:{server.server_port}"}
        },
    }
    settings = WebhookSettings.from_params(params)
    event = {
        "entity": "model_version_alias",
        "action": "created",
        "data": {"name": NAME, "alias": "challenger", "version": v1},
    }
    out = handle_event(params, settings, event, context_for=lambda s: ctx)
    server.shutdown()
    assert out == {"action": "dag_triggered", "dag_run_id": "manual__2026-11-30T09:00:00", "version": v1}
    path, headers, body = seen[0]
    assert path == "/api/v2/dags/promote/dagRuns" and headers["Authorization"] == "Bearer tok"
    assert body["conf"]["candidate"] == v1 and body["conf"]["scenario"] == SCENARIO and "logical_date" in body
    tags = ctx.tracker.model_version_tags(NAME, v1)
    assert tags[T.PROMOTION_OUTCOME] == "requested" and "manual__2026-11-30T09:00:00" in tags[T.PROMOTION_REASON]
    # rlops' own alias moves and other models' aliases are not requests
    ctx.tracker.set_alias(NAME, "challenger", v1)
    assert handle_event(params, settings, event, context_for=lambda s: ctx)["action"] == "ignored"
    other = {**event, "data": {"name": "credit_approval-reward-model", "alias": "challenger", "version": "1"}}
    assert handle_event(params, settings, other)["action"] == "ignored"


def test_webhook_signature_matches_mlflows() -> None:
    """The signature MLflow's own delivery code computes verifies; a changed byte does not."""
    from mlflow.webhooks.delivery import _generate_hmac_signature

    from rlops.pipeline_steps.promotion.webhook_signature import verify

    body = '{"entity": "model_version_alias", "action": "created", "data": {}}'
    sig = _generate_hmac_signature("k", "id-1", "1796000000", body)
    headers = {"X-MLflow-Signature": sig, "X-MLflow-Timestamp": "1796000000", "X-MLflow-Delivery-Id": "id-1"}
    assert verify("k", headers, body.encode(), 300, now=1796000010) is None
    assert "does not match" in verify("k", headers, body.encode() + b" ", 300, now=1796000010)
    assert "replay" in verify("k", headers, body.encode(), 300, now=1796009999)


def test_promotion_dag_wiring() -> None:
    src = (REPO_ROOT / "dags" / "promote.py").read_text()
    assert "tasks.promote_requested" in src and "run_conf.validate_promotion_conf" in src


def test_cli_registration_of_the_webhook_commands() -> None:
    from rlops.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["model", "webhook", "serve", "--port", "9000", "--mode", "airflow"])
    assert (args.port, args.mode, args.func.__name__) == (9000, "airflow", "cmd_webhook_serve")
    args = parser.parse_args(["model", "webhook", "register", "--url", "https://rlops.example.com/mlflow/webhook"])
    assert args.func.__name__ == "cmd_webhook_register"


def test_tag_module_and_pass_run_import_nothing_heavy() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import rlops.registry.tags, rlops.pipeline_steps.infra.pass_run, "
        "rlops.pipeline_steps.promotion.webhook\n"
        "heavy = [m for m in ('mlflow', 'torch', 'pandas', 'fastapi') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]

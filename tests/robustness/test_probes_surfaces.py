"""Probes of the surfaces a person reads and the promotion webhook: hostile registry content and
trace rows under the console, hostile deliveries at the receiver, aliases set around rlops.

Each probe is one finding: the console answers 200 with the page (never a 500), the receiver a
clean 4xx (never a 500, never a second action), an alias set around rlops never stands as rlops'
own move, and no response shows a credential. Real parts throughout: an MLflow SQLite registry,
a trace store written by ``capture``, the console and the receiver as ASGI apps.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlops.registry import tags as T
from rlops.registry.aliases import move_champion, rollback

S = "credit_approval"
NAME = f"{S}-policy"
SECRET = "probe-secret"


# --------------------------------------------------------------------------- a small deployment
@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, _mlflow_template_db: Path) -> Iterator[dict[str, Any]]:
    """Tracking (SQLite), storage and a trace store of rule-engine traffic, plus hostile rows:
    one episode whose ``reward_breakdown`` is a list (what an SDK episode writes for a dict-valued
    reward), one whose breakdown is not JSON."""
    import pandas as pd
    import torch

    from rlops.common.config import REPO_ROOT
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack

    tmp = tmp_path_factory.mktemp("surfaces")
    (tmp / "mlflow").mkdir()
    shutil.copyfile(_mlflow_template_db, tmp / "mlflow" / "mlflow.db")
    pack = load_pack(REPO_ROOT / "scenarios" / S, check_liveness=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow' / 'mlflow.db'}")
        mp.setenv("RLOPS_ARTIFACT_ROOT", str(tmp / "mlflow" / "artifacts"))
        mp.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp / 'storage'}")
        mp.setenv("RLOPS_HOME", str(tmp))
        mp.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mp.delenv("RLOPS_PARAMS", raising=False)
        mp.setattr(StepContext, "pack_with", lambda self, calibration: pack)
        torch.set_num_threads(1)
        ctx = StepContext.create(S, "20261201T0800", overrides={"tracking": {"http_max_retries": 0}})
        capture_step(ctx, CaptureRequest(simulate=True, profile="live", episodes=120))
        files = sorted((tmp / "storage").rglob("*.parquet"))
        files = [f for f in files if "quarantine" not in f.parts]
        df = pd.read_parquet(files[0])
        episodes = df["episode_id"].drop_duplicates().tolist()
        hostile = df[df["episode_id"].isin(episodes[:2])].copy()
        hostile["trace_id"] = "hostile-" + hostile["trace_id"].astype(str)
        hostile["episode_id"] = "hostile-" + hostile["episode_id"].astype(str)
        first = hostile["episode_id"] == hostile["episode_id"].iloc[0]
        hostile.loc[first, "reward_breakdown"] = json.dumps(
            [{"component": "sentiment", "score": 0.25}, {"component": "crm", "score": -1.5}]
        )
        hostile.loc[~first, "reward_breakdown"] = "{not json"
        hostile.to_parquet(files[0].with_name("zz-sdk-episode.parquet"), index=False)
        yield {
            "tmp": tmp,
            "ctx": ctx,
            "pack": pack,
            "list_trace": str(hostile.loc[first, "trace_id"].iloc[0]),
            "text_trace": str(hostile.loc[~first, "trace_id"].iloc[0]),
        }


def _version(ctx: Any, **tags: str) -> str:
    """Register a version of the policy model (an artifact folder with one file) with ``tags``."""
    with ctx.tracker.start_run("probe-version") as run:
        path = Path(ctx.local_dir("probe")) / "weights.txt"
        path.write_text("not a policy")
        run.log_artifact(path, artifact_path="policy")
        return ctx.tracker.register_model(run.run_id, "policy", NAME, tags=tags)


@pytest.fixture(scope="module")
def console(home: dict[str, Any]) -> Any:
    from fastapi.testclient import TestClient

    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    return TestClient(create_app(ProjectData(registry_ttl_s=0.0)))


def _ok(r: Any) -> str:
    assert r.status_code == 200, (r.status_code, r.text[-500:])
    assert "could not be built" not in r.text and "Traceback" not in r.text
    return r.text


# --------------------------------------------------------------------------- console probes
def probe_breakdown_list_episode(home: dict[str, Any], console: Any) -> None:
    page = _ok(console.get(f"/s/{S}/episode/{home['list_trace']}"))
    assert "sentiment" in page and "+0.25" in page and "-1.5" in page


def probe_breakdown_not_json_episode(home: dict[str, Any], console: Any) -> None:
    _ok(console.get(f"/s/{S}/episode/{home['text_trace']}"))


def probe_breakdown_list_map(home: dict[str, Any], console: Any) -> None:
    page = _ok(console.get(f"/s/{S}/map?version=rules"))
    assert 'class="node"' in page


def probe_pack_without_versions(home: dict[str, Any], console: Any) -> None:
    page = _ok(console.get("/s/complaint_handling/promotion"))
    assert "No policy version is registered yet" in page


def probe_promoted_at_not_iso(home: dict[str, Any], console: Any) -> None:
    v = _version(
        home["ctx"],
        **{
            T.VERSION.PROMOTED_AT: "yesterday",
            T.VERSION.TRAFFIC_FRACTION: "lots",
            T.VERSION.EVAL_RUN_ID: "../../etc/passwd",
        },
    )
    import html

    page = html.unescape(_ok(console.get(f"/s/{S}/promotion")))
    assert f"v{v} promoted to champion (promoted_at tag 'yesterday' is not a time)" in page


def probe_gates_artifact_not_a_table(home: dict[str, Any], console: Any) -> None:
    ctx = home["ctx"]
    with ctx.tracker.start_run(
        "evaluate · hostile", tags={T.STEP: T.EVALUATE, T.CANDIDATE: "1", T.BASELINE: "rules", T.PASSED: "true"}
    ) as run:
        run.log_dict({"columns": "gate", "data": 7}, "gates.json")
    page = _ok(console.get(f"/s/{S}/evaluation/{run.run_id}"))
    assert "Gate table: v1 vs rules" in page and "not available" in page


def probe_evaluation_page_reads_rlops_tags(home: dict[str, Any], console: Any) -> None:
    ctx = home["ctx"]
    with ctx.tracker.start_run(
        "evaluate · tags", tags={T.STEP: T.EVALUATE, T.CANDIDATE: "4", T.BASELINE: "champion v3", T.PASSED: "true"}
    ) as run:
        run.log_dict(
            {
                "columns": ["gate", "passed", "status", "detail"],
                "data": [
                    ["mean_return", True, "pass", ""],
                    ["segment:low_credit_score", True, "skipped", "skipped: 92 episodes"],
                ],
            },
            "gates.json",
        )
    page = _ok(console.get(f"/s/{S}/evaluation/{run.run_id}"))
    assert "Gate table: v4 vs champion v3" in page and "vNone" not in page
    assert 'data-gate="segment:low_credit_score" data-state="skipped"' in page


def probe_numbers_rounded_with_units(home: dict[str, Any], console: Any) -> None:
    import re

    page = _ok(console.get(f"/s/{S}/episode/{home['list_trace']}"))
    text = re.sub(r"<[^>]+>", " ", page)
    assert not re.findall(r"\d\.\d{6,}", text), re.findall(r"\S*\d\.\d{6,}\S*", text)[:5]


def probe_clusters_named(home: dict[str, Any], console: Any) -> None:
    import re

    page = _ok(console.get(f"/s/{S}/map?version=rules"))
    names = re.findall(r'class="node-name">([^<]+)<', page)
    assert names and not any(re.fullmatch(r"cluster \d+", n) for n in names), names


def probe_edge_labels_do_not_overlap(home: dict[str, Any], console: Any) -> None:
    import re

    from rlops.console.svg import overlaps, text_box

    page = _ok(console.get(f"/s/{S}/map?version=rules"))
    labels = [
        (float(x), float(y), t)
        for x, y, t in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" class="edge-label">([^<]+)<', page)
    ]
    boxes = [text_box(x, y, t) for x, y, t in labels]
    assert labels
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if overlaps(a, b)]


def probe_drift_footnote_not_a_dict(home: dict[str, Any], console: Any) -> None:
    ctx = home["ctx"]
    ctx.storage.write_json(
        ctx.uri("calibrations", S, "20261201T0700.json"),
        {
            "version": "20261201T0700",
            "created": "2026-12-01T07:00:00Z",
            "check": {},
            "fit": {"skipped": {"user_profile.age": "fewer than 50 rows"}},
        },
    )
    page = _ok(console.get(f"/s/{S}/drift"))
    assert "{'user_profile.age'" not in page and "user_profile.age</code>: fewer than 50 rows" in page


# --------------------------------------------------------------------------- vocabulary probes
def probe_description_says_skipped(home: dict[str, Any], console: Any) -> None:
    from rlops.pipeline_steps.promotion.gate_table import with_gate_summary
    from rlops.pipeline_steps.promotion.gates import Gate

    seg = Gate("segment:low_credit_score", None, None, "n >= 100", True, "skipped: 92 episodes", skipped=True)
    text = with_gate_summary(
        "Policy.\n\nGates: not evaluated yet",
        {
            "run_key": "k",
            "baseline": "rules",
            "episodes": 92,
            "profile": "live",
            "failed_gates": [],
            "gates": [seg.to_dict()],
        },
    )
    assert "- segment:low_credit_score: skipped (n >= 100; skipped: 92 episodes)" in text
    assert "pass (n >= 100)" not in text


def probe_cli_table_says_skipped(home: dict[str, Any], console: Any) -> None:
    from rlops.commands.model import _gate_lines
    from rlops.pipeline_steps.promotion.gates import Gate

    rows = [
        Gate("mean_return", 1.0, 0.5, "> 0", False).to_dict(),
        Gate("segment:x", None, None, "n >= 100", True, "skipped: 92 episodes", skipped=True).to_dict(),
    ]
    lines = _gate_lines({"gates": rows})
    assert lines[1].rstrip().endswith(" fail") and lines[2].rstrip().endswith(" skipped")


def probe_new_champion_sheds_rejected(home: dict[str, Any], console: Any) -> None:
    ctx = home["ctx"]
    v = _version(ctx)
    ctx.tracker.record_outcome(NAME, v, T.OUTCOME_REJECTED, "gate(s) failed: mean_return", "mlflow-ui-alias")
    page = _ok(console.get(f"/s/{S}/promotion"))
    assert f"v{v} rejected (requested by mlflow-ui-alias): gate(s) failed: mean_return" in page
    move_champion(ctx.tracker, NAME, v)
    tags = ctx.tracker.model_version_tags(NAME, v)
    assert tags[T.PROMOTION_OUTCOME] == T.OUTCOME_CHAMPION and tags[T.PROMOTION_REQUESTED_BY] == "rlops"
    assert f"v{v} rejected" not in _ok(console.get(f"/s/{S}/promotion"))


def probe_experiment_opens_on_training_view(home: dict[str, Any], console: Any) -> None:
    exp = home["ctx"].tracker.client.get_experiment_by_name(S)
    assert exp.tags.get(T.EXPERIMENT_KIND) == T.EXPERIMENT_KIND_TRAINING


# --------------------------------------------------------------------------- aliases set around rlops
def _three_versions(ctx: Any) -> tuple[str, str, str]:
    """v_a then v_b promoted by rlops (champion v_b, previous v_a), v_c registered only."""
    a, b, c = _version(ctx), _version(ctx), _version(ctx)
    move_champion(ctx.tracker, NAME, a)
    move_champion(ctx.tracker, NAME, b)
    return a, b, c


def probe_rollback_refuses_hand_set_previous(home: dict[str, Any], console: Any) -> None:
    ctx = home["ctx"]
    a, b, c = _three_versions(ctx)
    ctx.tracker.client.set_registered_model_alias(NAME, "previous", c)  # what the MLflow UI does
    with pytest.raises(ValueError, match="set outside rlops"):
        rollback(ctx.tracker, NAME)
    assert ctx.tracker.get_alias(NAME, "champion") == b


def probe_forged_alias_record_does_not_make_a_champion(home: dict[str, Any], console: Any) -> None:
    from rlops.pipeline_steps.promotion.flow import check_champion

    ctx = home["ctx"]
    a, b, c = _three_versions(ctx)
    client = ctx.tracker.client
    client.set_registered_model_alias(NAME, "champion", c)
    client.set_registered_model_tag(NAME, T.alias_written("champion"), c)  # a hand-set record
    client.set_registered_model_tag(NAME, T.alias_signature("champion"), "1:00")  # and a made-up signature
    ctx.config.promotion.manual_champion = "revert"  # the typed block every step reads
    try:
        check = check_champion(ctx)
    finally:
        ctx.config.promotion.manual_champion = "regate"
    assert check.action == "reverted" and ctx.tracker.get_alias(NAME, "champion") != c


# --------------------------------------------------------------------------- the webhook receiver
def _signed(body: bytes, delivery: str, ts: int | None = None) -> dict[str, str]:
    ts_s = str(int(time.time()) if ts is None else ts)
    mac = hmac.new(SECRET.encode(), f"{delivery}.{ts_s}.".encode() + body, hashlib.sha256).digest()
    return {
        "X-MLflow-Signature": "v1," + base64.b64encode(mac).decode(),
        "X-MLflow-Timestamp": ts_s,
        "X-MLflow-Delivery-Id": delivery,
        "Content-Type": "application/json",
    }


def _event(alias: str = "staging", version: str = "1", name: str = NAME) -> bytes:
    return json.dumps(
        {
            "entity": "model_version_alias",
            "action": "created",
            "data": {"name": name, "alias": alias, "version": version},
        }
    ).encode()


def _receiver(home: dict[str, Any], tmp: Path, **webhook: Any) -> tuple[Any, Any]:
    from fastapi.testclient import TestClient

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.webhook import create_app
    from rlops.pipeline_steps.promotion.webhook_settings import WebhookSettings

    params = dict(home["ctx"].params)
    tracking = webhook.pop("tracking", None)
    params["promotion"] = {
        **(params.get("promotion") or {}),
        "webhook": {"state_db": str(tmp / "webhook.db"), **webhook},
    }
    if tracking:
        params["tracking"] = {**params["tracking"], **tracking}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLOPS_WEBHOOK_SECRET", SECRET)
        settings = WebhookSettings.from_params(params)

    def context_for(scenario: str) -> StepContext:
        return StepContext.create(scenario, "20261201T0800", params=params)

    app = create_app(params, settings, context_for=context_for)
    return TestClient(app), app


def _wait_outcome(client: Any, delivery: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = client.get(f"/outcomes/{delivery}")
        if r.status_code == 200:
            return r.json()
        time.sleep(0.1)
    raise AssertionError(f"no outcome for {delivery}")


def probe_replayed_delivery_refused(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    client, _ = _receiver(home, tmp_path)
    body = _event("staging")
    first = client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-replay"))
    again = client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-replay"))
    assert first.status_code == 202 and again.status_code == 409, (first.text, again.text)


def probe_replay_refused_across_restart(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    body = _event("staging")
    client, _ = _receiver(home, tmp_path)
    assert client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-restart")).status_code == 202
    restarted, _ = _receiver(home, tmp_path)
    assert restarted.post("/mlflow/webhook", content=body, headers=_signed(body, "d-restart")).status_code == 409


def probe_body_over_the_cap_refused_unread(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    client, _ = _receiver(home, tmp_path, max_body_bytes=1024)
    body = b"x" * 4096
    assert client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-big")).status_code == 413
    sent = []

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap holds while streaming
        for _ in range(64):
            sent.append(1)
            yield b"y" * 512

    r = client.post("/mlflow/webhook", content=chunks(), headers={"X-MLflow-Delivery-Id": "d-stream"})
    assert r.status_code == 413


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[1, 2, 3]", id="json-array"),
        pytest.param(b'"a string"', id="json-string"),
        pytest.param(b"[" * 50_000 + b"]" * 50_000, id="deep-document"),
        pytest.param(b"\xff\xfe not utf-8", id="not-utf8"),
        pytest.param(
            json.dumps({"entity": "model_version_alias", "action": "created", "data": [1]}).encode(),
            id="data-not-object",
        ),
        pytest.param(
            json.dumps(
                {
                    "entity": "model_version_alias",
                    "action": "created",
                    "data": {"name": {"x": 1}, "alias": "challenger", "version": "1"},
                }
            ).encode(),
            id="name-not-string",
        ),
    ],
)
def probe_signed_malformed_body_is_400(home: dict[str, Any], console: Any, tmp_path: Path, body: bytes) -> None:
    client, _ = _receiver(home, tmp_path, max_body_bytes=1_000_000)
    r = client.post("/mlflow/webhook", content=body, headers=_signed(body, f"d-{hash(body)}"))
    assert r.status_code == 400, (r.status_code, r.text[:300])


def probe_outcome_hides_tracking_password(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    client, _ = _receiver(
        home,
        tmp_path,
        tracking={"uri": "http://rlops:hunter2@127.0.0.1:9/", "http_max_retries": 0, "http_timeout_s": 1},
    )
    body = _event("challenger")
    assert client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-secret")).status_code == 202
    out = _wait_outcome(client, "d-secret")
    assert out["action"] == "error" and "hunter2" not in json.dumps(out) and "***@" in json.dumps(out)


def probe_hostile_signature_headers_are_4xx(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    """Unauthenticated requests whose headers break the arithmetic or the comparison of the
    signature check: refused, never a 500."""
    client, _ = _receiver(home, tmp_path)
    body = _event("challenger")
    good = _signed(body, "d-hostile")
    cases = {
        "400-digit timestamp, forged signature": {**good, "X-MLflow-Timestamp": "9" * 400},
        "400-digit timestamp, unsigned": {**good, "X-MLflow-Timestamp": "1" * 400, "X-MLflow-Signature": "v1,"},
        "negative 400-digit timestamp": {**good, "X-MLflow-Timestamp": "-" + "9" * 400},
        "non-ASCII signature": {**good, "X-MLflow-Signature": "v1,\u00ff\u00fe=="},
        "non-ASCII signature beside a wrong one": {**good, "X-MLflow-Signature": "v1,AAAA v1,\u00e9"},
    }
    for case, headers in cases.items():
        sent = {k: v.encode("latin-1") for k, v in headers.items()}  # the bytes on the wire
        r = client.post("/mlflow/webhook", content=body, headers=sent)
        assert 400 <= r.status_code < 500 and "Traceback" not in r.text, (case, r.status_code, r.text[:300])
        assert len(r.text) < 1000, (case, r.text[:300])
    assert client.get("/outcomes/d-hostile").status_code == 404  # nothing was acted on


def probe_failed_delivery_logged_in_one_redacted_line(
    home: dict[str, Any], console: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client, _ = _receiver(
        home,
        tmp_path,
        tracking={"uri": "http://rlops:hunter2@127.0.0.1:9/", "http_max_retries": 0, "http_timeout_s": 1},
    )
    body = _event("challenger")
    with caplog.at_level(logging.INFO):
        assert client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-fail-log")).status_code == 202
        assert _wait_outcome(client, "d-fail-log")["action"] == "error"
    formatter = logging.Formatter()
    logged = [formatter.format(r) for r in caplog.records]
    assert not [t for t in logged if "hunter2" in t], [t for t in logged if "hunter2" in t][0][:2000]
    failed = [t for t in logged if "d-fail-log failed" in t]
    assert len(failed) == 1 and "\n" not in failed[0] and "***@" in failed[0], failed


def probe_hand_set_previous_reverted(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    ctx = home["ctx"]
    a, b, c = _three_versions(ctx)
    ctx.tracker.client.set_registered_model_alias(NAME, "previous", c)
    client, _ = _receiver(home, tmp_path)
    body = _event("previous", c)
    assert client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-prev")).status_code == 202
    out = _wait_outcome(client, "d-prev")
    assert out["action"] == "reverted_previous" and ctx.tracker.get_alias(NAME, "previous") == a


def probe_decision_logged_in_one_line(
    home: dict[str, Any], console: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = home["ctx"]
    a, b, c = _three_versions(ctx)
    ctx.tracker.client.set_registered_model_alias(NAME, "previous", c)
    client, _ = _receiver(home, tmp_path)
    body = _event("previous", c)
    with caplog.at_level(logging.INFO, logger="rlops.pipeline_steps.promotion.webhook"):
        client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-log"))
        _wait_outcome(client, "d-log")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("webhook decision:")]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert f"{NAME} v{c}" in lines[0] and "reverted_previous" in lines[0] and "no gates judged" in lines[0]


def probe_decision_line_of_a_triggered_dag_claims_no_gates(home: dict[str, Any], console: Any) -> None:
    """In airflow mode the receiver only triggers the promotion DAG: its line said "failing gates:
    none" before any gate had run."""
    from rlops.pipeline_steps.promotion.webhook_events import decision_line

    line = decision_line(
        {"data": {"name": NAME, "alias": "challenger", "version": "7"}},
        {"action": "dag_triggered", "dag_run_id": "manual__2026-12-07", "version": "7"},
    )
    assert "failing gates" not in line and "gates judged by the promotion DAG run manual__2026-12-07" in line


def probe_decision_line_names_failing_gates(home: dict[str, Any], console: Any) -> None:
    from rlops.pipeline_steps.promotion.webhook_events import decision_line

    line = decision_line(
        {"data": {"name": NAME, "alias": "challenger", "version": "7"}},
        {
            "action": "promotion",
            "outcome": "rejected",
            "failed_gates": ["mean_return", "ab:handling_ms"],
            "reason": "gate(s) failed: mean_return, ab:handling_ms; champion unchanged",
        },
    )
    assert line.startswith(
        f"webhook decision: {NAME} v7 alias challenger → rejected; failing gates: mean_return, ab:handling_ms"
    )


class _AirflowApi(BaseHTTPRequestHandler):
    """Airflow 3's ``POST /api/v2/dags/<id>/dagRuns`` as the receiver sees it: JSON in, a run id out."""

    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append(body)
        out = json.dumps({"dag_run_id": f"manual__{len(self.received)}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


def probe_airflow_down_request_kept_until_delivered(home: dict[str, Any], console: Any, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client, app = _receiver(home, tmp_path, mode="airflow", airflow_url=f"http://127.0.0.1:{port}", retry_s=3600)
    v = _version(home["ctx"])
    body = _event("challenger", v)
    assert client.post("/mlflow/webhook", content=body, headers=_signed(body, "d-down")).status_code == 202
    out = _wait_outcome(client, "d-down")
    assert out["action"] == "kept", out
    receiver = app.state.receiver
    assert [p.delivery_id for p in receiver.store.pending()] == ["d-down"]
    assert home["ctx"].tracker.model_version_tags(NAME, v)[T.PROMOTION_OUTCOME] == T.OUTCOME_REQUESTED
    _AirflowApi.received = []
    server = HTTPServer(("127.0.0.1", port), _AirflowApi)  # Airflow is back
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        receiver.store.keep("d-down", receiver.store.pending()[0].payload, "", 0)  # due now
        done = receiver.retry_pending()
    finally:
        server.shutdown()
    assert [d["action"] for d in done] == ["dag_triggered"] and receiver.store.pending() == []
    assert _AirflowApi.received[0]["conf"]["candidate"] == v


SURFACE_PROBES: list[Callable[..., None]] = [f for n, f in sorted(globals().items()) if n.startswith("probe_")]


def _takes(probe: Callable[..., None], name: str) -> bool:
    import inspect

    return name in inspect.signature(probe).parameters


def _id(probe: Callable[..., None]) -> str:
    return probe.__name__[len("probe_") :].replace("_", "-")


@pytest.mark.parametrize("probe", [p for p in SURFACE_PROBES if not _takes(p, "tmp_path")], ids=_id)
def test_surface_probe(probe: Callable[..., None], home: dict[str, Any], console: Any) -> None:
    probe(home, console)


@pytest.mark.parametrize(
    "probe", [p for p in SURFACE_PROBES if _takes(p, "tmp_path") and not _takes(p, "body")], ids=_id
)
def test_webhook_probe(
    probe: Callable[..., None], home: dict[str, Any], console: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    probe(home, console, tmp_path, *([caplog] if _takes(probe, "caplog") else []))


test_webhook_malformed_body = probe_signed_malformed_body_is_400


# --------------------------------------------------------------------------- hostile path segments
#: Strings a visitor can put in a console URL's path segments and query parameters.
HOSTILE_SEGMENTS: dict[str, str] = {
    "single-quote": "x' OR '1'='1",
    "double-quote": 'x" OR "1"="1',
    "semicolon-drop": "x'; DROP TABLE traces; --",
    "line-comment": "x -- rest",
    "nul": "x\x00y",
    "ten-thousand": "a" * 10_000,
    "script": "<script>alert(1)</script>",
    "traversal": "../../../../etc/passwd",
    "percent": "%",
    "unicode": "трасса-🙂",
}
ROUTES: dict[str, str] = {
    "episode-trace-id": f"/s/{S}/episode/{{v}}",
    "evaluation-run-id": f"/s/{S}/evaluation/{{v}}",
    "scenario-segment": "/s/{v}",
    "scenario-promotion": "/s/{v}/promotion",
    "map-version": f"/s/{S}/map?version={{v}}",
    "rewards-diff": f"/s/{S}/rewards/diff?a={{v}}&b=v1",
}


@pytest.mark.parametrize("value", list(HOSTILE_SEGMENTS.values()), ids=list(HOSTILE_SEGMENTS))
@pytest.mark.parametrize("route", list(ROUTES.values()), ids=list(ROUTES))
def test_console_hostile_segment(
    home: dict[str, Any], console: Any, route: str, value: str, request: pytest.FixtureRequest
) -> None:
    """Every page answers a hostile id, version or scenario with the page or a 4xx page naming
    nothing it does not have — never a 500 or a traceback — and never echoes markup unescaped."""
    from urllib.parse import quote

    from .io_harness import IOProbe, check, run_probe

    def run(tmp: Path) -> Any:
        r = console.get(route.format(v=quote(value, safe="")))
        if r.status_code >= 500 or "Traceback" in r.text or "could not be built" in r.text:
            return "traceback", f"{r.status_code}: {r.text[-300:]}"
        if r.status_code not in (200, 400, 404, 422):
            return "accepted", f"status {r.status_code}"
        if "<script>alert(1)</script>" in r.text:
            return "security", "the page echoes markup from the URL unescaped"
        return None

    check(run_probe(IOProbe(f"console-{request.node.callspec.id}", run), home["tmp"] / "probes"))

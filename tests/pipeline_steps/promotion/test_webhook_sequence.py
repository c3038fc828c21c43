"""The promotion webhook over time, as an operator and an intruder would drive it: a signed
delivery promotes, the operator rolls back, the same delivery is sent again; a ``previous`` set by
hand before the next rollback. Real gates on the credit pack, a real MLflow registry, the receiver
as an ASGI app (embedded mode).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rlops.registry import tags as T
from rlops.registry.aliases import move_champion
from tests.policy_kit import (  # noqa: F401  (fixtures)
    NAME,
    approve_all,
    good,
    pack,
    promotion_ctx,
    promotion_sandbox,
    register,
)

pytestmark = pytest.mark.usefixtures("promotion_sandbox")
SECRET = "sequence-secret"


def _post(client: Any, alias: str, version: str, delivery: str, ts: int) -> Any:
    from rlops.pipeline_steps.promotion.webhook_signature import sign

    body = json.dumps(
        {
            "entity": "model_version_alias",
            "action": "created",
            "data": {"name": NAME, "alias": alias, "version": version},
        }
    ).encode()
    headers = {
        "X-MLflow-Signature": sign(SECRET, delivery, str(ts), body),
        "X-MLflow-Timestamp": str(ts),
        "X-MLflow-Delivery-Id": delivery,
        "Content-Type": "application/json",
    }
    return client.post("/mlflow/webhook", content=body, headers=headers)


def _outcome(client: Any, delivery: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = client.get(f"/outcomes/{delivery}")
        if r.status_code == 200:
            return r.json()
        time.sleep(0.2)
    raise AssertionError(f"no outcome for delivery {delivery}")


def test_a_replayed_delivery_and_a_hand_set_previous_never_move_the_champion(
    pack: Any, good: Any, approve_all: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from rlops.pipeline_steps.promotion.flow import rollback
    from rlops.pipeline_steps.promotion.webhook import create_app
    from rlops.pipeline_steps.promotion.webhook_settings import WebhookSettings

    ctx = promotion_ctx()
    v1 = register(ctx, pack, approve_all)
    move_champion(ctx.tracker, NAME, v1)
    v2 = register(ctx, pack, good)
    v3 = register(ctx, pack, approve_all)
    monkeypatch.setenv("RLOPS_WEBHOOK_SECRET", SECRET)
    params = dict(ctx.params)
    params["promotion"] = {**params.get("promotion", {}), "webhook": {"state_db": str(tmp_path / "webhook.db")}}
    app = create_app(params, WebhookSettings.from_params(params), context_for=lambda scenario: promotion_ctx())
    client = TestClient(app)

    # 1. challenger set in the UI on v2: gated, passes, v2 is champion and v1 previous
    ts = int(time.time())
    assert _post(client, "challenger", v2, "delivery-1", ts).status_code == 202
    assert _outcome(client, "delivery-1")["outcome"] == "champion"
    assert ctx.tracker.aliases(NAME) == {"champion": v2, "previous": v1}

    # 2. the operator rolls back; 3. the same signed delivery, still inside its time window, is refused
    rollback(promotion_ctx())
    assert ctx.tracker.get_alias(NAME, "champion") == v1
    assert ctx.tracker.model_version_tags(NAME, v2)[T.PROMOTION_OUTCOME] == T.OUTCOME_ROLLED_BACK
    assert _post(client, "challenger", v2, "delivery-1", ts).status_code == 409
    time.sleep(1.0)
    assert ctx.tracker.get_alias(NAME, "champion") == v1

    # 4. v2 again through the gates (a new delivery): champion v2, previous v1, and no stale outcome
    assert _post(client, "challenger", v2, "delivery-2", int(time.time())).status_code == 202
    assert _outcome(client, "delivery-2")["outcome"] == "champion"
    tags = ctx.tracker.model_version_tags(NAME, v2)
    assert tags[T.PROMOTION_OUTCOME] == "champion" and T.ROLLED_BACK not in tags

    # 5. previous set by hand on the failing v3: put back to v1 at once …
    ctx.tracker.client.set_registered_model_alias(NAME, "previous", v3)
    assert _post(client, "previous", v3, "delivery-3", int(time.time())).status_code == 202
    assert _outcome(client, "delivery-3")["action"] == "reverted_previous"
    assert ctx.tracker.get_alias(NAME, "previous") == v1
    # … and had the event been lost, rollback still refuses a previous rlops did not set
    ctx.tracker.client.set_registered_model_alias(NAME, "previous", v3)
    with pytest.raises(ValueError, match="set outside rlops"):
        rollback(promotion_ctx())
    assert ctx.tracker.get_alias(NAME, "champion") == v2

"""MLflow's model-registry webhooks: the one that calls rlops' promotion receiver
(:mod:`rlops.pipeline_steps.promotion.webhook`) whenever an alias is set on a model version.

Webhooks need an MLflow server (3.3+) with a SQL backend that accepts the receiver's URL (MLflow
refuses ``http`` and private addresses by default: docs/mlflow.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.entities.webhook import WebhookEventStr

#: The registry events the receiver acts on.
EVENTS: tuple[WebhookEventStr, ...] = ("model_version_alias.created",)


def register_webhook(tracking_uri: str, url: str, secret: str, name: str = "rlops-promotion") -> str:
    """Create (or update) the MLflow webhook ``name`` that calls the receiver at ``url``; returns its
    id. Needs an MLflow server with a SQL backend that accepts ``url`` (see docs/mlflow.md for the
    settings)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for hook in client.list_webhooks():
        if hook.name == name:
            return str(
                client.update_webhook(
                    hook.webhook_id, url=url, events=list(EVENTS), secret=secret, status="ACTIVE"
                ).webhook_id
            )
    return str(
        client.create_webhook(
            name=name,
            url=url,
            events=list(EVENTS),
            secret=secret,
            description="rlops: gated promotion when `challenger` is set in the UI; hand-set `champion` check",
        ).webhook_id
    )

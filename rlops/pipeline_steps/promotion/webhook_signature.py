"""The signature of MLflow's webhook deliveries (Standard Webhooks style): ``X-MLflow-Signature:
v1,<base64>``, an HMAC-SHA256 with the secret shared with MLflow over ``<delivery id>.<timestamp>.<body>``.

The receiver (:mod:`rlops.pipeline_steps.promotion.webhook`) acts only on a request that
:func:`verify` accepts: signed with the secret and stamped within the tolerance of now. A header
that cannot be a timestamp or a signature (a number too large for a float, non-ASCII bytes) is
refused like an unsigned request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping

SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER = "X-MLflow-Signature", "X-MLflow-Timestamp", "X-MLflow-Delivery-Id"


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """MLflow's webhook signature: ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""
    content = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha256).digest()).decode()


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, tolerance_s: int, now: float | None = None
) -> str | None:
    """None when the request is signed with ``secret`` and recent, else what is wrong."""
    sig, ts, did = (
        headers.get(h) or headers.get(h.lower()) for h in (SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER)
    )
    if not (sig and ts and did):
        return "missing signature, timestamp or delivery id header"
    try:
        age = abs((now if now is not None else time.time()) - int(ts))
    except (ValueError, OverflowError):  # a number of hundreds of digits does not fit a float
        return f"timestamp {ts[:40]!r} is not a Unix time"
    if age > tolerance_s:
        return f"timestamp is {age:.0f} s away from now (tolerance {tolerance_s} s): a replay?"
    expected = sign(secret, did, ts, body)
    # compare_digest raises on non-ASCII text; a signature of ours is base64, so such a one is wrong
    if not any(s.isascii() and hmac.compare_digest(expected, s) for s in sig.split()):
        return "signature does not match the shared secret"
    return None

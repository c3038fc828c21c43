"""Credentials never leave in a message: URIs' user:password and secret query parameters are masked.

A tracking URI such as ``postgresql://rlops:hunter2@db/mlflow`` or ``https://user:token@mlflow``
appears in error messages (which reach logs, CLI output and HTTP responses); :func:`redact`
turns it into ``postgresql://***@db/mlflow``.
"""

from __future__ import annotations

import re
from typing import Any

# Up to the authority's last '@': a password may hold an unencoded '@' (clients split there too),
# and stopping at the first one would leave the rest of it in clear. A scheme starts only where no
# scheme character precedes it: from every word boundary of a run like "a.a.a…" the search would
# rescan the run, quadratic in text a client controls.
_USERINFO = re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]*://)[^/?#\s'\"]+@")
_SECRET_PARAM = re.compile(r"(?i)\b((?:password|passwd|pwd|token|secret|api[_-]?key|access[_-]?key)=)[^&\s'\"]+")


def redact(value: Any) -> Any:
    """``value`` (text, or dicts and lists of it) with credentials replaced by ``***``."""
    if isinstance(value, str):
        return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub(r"\1***@", value))
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value

"""Credentials in messages are masked whole, whatever characters the password holds."""

from __future__ import annotations

import pytest

from rlops.common.redact import redact

MASKED = {
    "plain": ("http://rlops:hunter2@127.0.0.1:5000/api", "http://***@127.0.0.1:5000/api"),
    # An unencoded '@' in a password: clients split the authority at its last '@', so it works as a
    # tracking URI, and the whole of it must go.
    "an @ in the password": (
        "API request to http://rlops:hun@ter2@127.0.0.1:9/api/2.0/mlflow/x failed",
        "API request to http://***@127.0.0.1:9/api/2.0/mlflow/x failed",
    ),
    "a database URI": ("postgresql://rlops:p@ss:w0rd@db:5432/mlflow", "postgresql://***@db:5432/mlflow"),
    "two URIs": ("http://a:b@h1/x then https://c:d@h2/y", "http://***@h1/x then https://***@h2/y"),
    "quoted": ("uri='http://u:p@w@h/' rest", "uri='http://***@h/' rest"),
    "a secret parameter": ("https://h/x?token=abc&b=1", "https://h/x?token=***&b=1"),
    "no credentials": (
        "http://127.0.0.1:5000/api, mail ops@example.com",
        "http://127.0.0.1:5000/api, mail ops@example.com",
    ),
}


@pytest.mark.parametrize("case", list(MASKED), ids=lambda c: c.replace(" ", "-"))
def test_credentials_are_masked_whole(case: str) -> None:
    text, expected = MASKED[case]
    assert redact(text) == expected


@pytest.mark.parametrize("text", ["a." * 50_000, "a-" * 50_000, "token" * 20_000], ids=["dots", "dashes", "words"])
def test_redaction_takes_linear_time_on_hostile_text(text: str) -> None:
    """Text a client controls (a header, an event field) is redacted before it is logged: scheme-like
    runs must not make the search quadratic (100,000 characters took over a minute)."""
    import time

    start = time.perf_counter()
    assert redact(text) == text
    assert time.perf_counter() - start < 2.0

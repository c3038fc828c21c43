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

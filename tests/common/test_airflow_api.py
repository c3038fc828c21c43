"""The Airflow REST client renews its token before it lapses and when it is refused, against a real
HTTP server on 127.0.0.1 that issues short-lived tokens."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlops.common.airflow_api import AirflowApi, read_credentials, token_expiry
from rlops.common.errors import UserError


def _jwt(exp: float, n: int) -> str:
    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS512'})}.{part({'exp': exp, 'n': n})}.sig"


class _Airflow(BaseHTTPRequestHandler):
    lifetime_s = 3600.0
    logins: list[str] = []
    valid: set[str] = set()

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _answer(self, code: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/auth/token":
            if body != {"username": "admin", "password": "pw"}:
                return self._answer(401, {"detail": "bad credentials"})
            token = _jwt(time.time() + self.lifetime_s, len(self.logins))
            self.logins.append(token)
            self.valid.add(token)
            return self._answer(201, {"access_token": token})
        return self._answer(404, {})

    def do_GET(self) -> None:  # noqa: N802
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if token not in self.valid:
            return self._answer(401, {"detail": "token expired"})
        if self.path == "/api/v2/pools/gpu":
            return self._answer(200, {"name": "gpu", "slots": 1})
        return self._answer(404, {"detail": "no such pool"})


@pytest.fixture()
def airflow() -> Iterator[tuple[str, type[_Airflow]]]:
    handler = type("Handler", (_Airflow,), {"logins": [], "valid": set(), "lifetime_s": 3600.0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()


def test_one_login_serves_many_calls(airflow: tuple[str, type[_Airflow]]) -> None:
    url, server = airflow
    api = AirflowApi(url, "admin", "pw")
    assert api.pool_exists("gpu") and not api.pool_exists("cpu") and api.pool_exists("gpu")
    assert len(server.logins) == 1


def test_a_token_about_to_expire_is_renewed_before_the_call(airflow: tuple[str, type[_Airflow]]) -> None:
    url, server = airflow
    server.lifetime_s = 60  # within RENEW_BEFORE_S: every call needs a fresh one
    api = AirflowApi(url, "admin", "pw")
    api.pool_exists("gpu")
    api.pool_exists("gpu")
    assert len(server.logins) == 2


def test_a_refused_token_is_renewed_once(airflow: tuple[str, type[_Airflow]]) -> None:
    url, server = airflow
    api = AirflowApi(url, "admin", "pw")
    assert api.pool_exists("gpu")
    server.valid.clear()  # the API server restarted with a new secret: every old token is refused
    assert api.pool_exists("gpu")
    assert len(server.logins) == 2


def test_a_fixed_token_is_not_renewed(airflow: tuple[str, type[_Airflow]]) -> None:
    import urllib.error

    url, _ = airflow
    with pytest.raises(urllib.error.HTTPError) as exc:
        AirflowApi(url, token="stale").pool_exists("gpu")
    assert exc.value.code == 401


def test_token_expiry_reads_the_claim_and_tolerates_garbage() -> None:
    assert token_expiry(_jwt(1234.0, 0)) == 1234.0
    assert token_expiry("not-a-jwt") is None
    assert token_expiry("a.%%%.c") is None


def test_from_env_and_bad_credentials_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLOPS_AIRFLOW_URL", raising=False)
    assert AirflowApi.from_env() is None
    creds = tmp_path / "c.json"
    creds.write_text(json.dumps({"username": "admin", "password": "pw"}))
    monkeypatch.setenv("RLOPS_AIRFLOW_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("RLOPS_AIRFLOW_CREDENTIALS", str(creds))
    api = AirflowApi.from_env()
    assert api is not None and (api.username, api.password) == ("admin", "pw")
    for text in ("{", "[]", json.dumps({"username": 1, "password": "x"})):
        creds.write_text(text)
        with pytest.raises(UserError, match="credentials file"):
            read_credentials(creds)
    with pytest.raises(UserError, match="does not exist"):
        read_credentials(tmp_path / "missing.json")

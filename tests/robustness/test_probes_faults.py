"""Fault probes: storage that fails underneath rlops, using only this machine — a closed port, an
HTTP server on 127.0.0.1 that answers every request with an error (or never answers), a moto S3
server without the bucket, a read-only mount and a 64 KiB tmpfs (skipped with the reason when
mounting is not permitted). Every fault is a :class:`StorageError` naming the operation and the
URI (exit 1 with one ``error:`` line on the command line), never an empty result, a hang or a
half-written object. One test per probe."""

from __future__ import annotations

import http.server
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest

from .capture_kit import line, write_file
from .io_harness import IOProbe, Verdict, check, expect_cli_error, expect_error, ids, run_probe


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 500
    body = b"<Error><Code>InternalError</Code><Message>probe</Message></Error>"
    hang = False

    def _reply(self) -> None:
        if self.hang:
            time.sleep(30)
            return
        self.send_response(self.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(self.body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _reply

    def log_message(self, *args: object) -> None:
        return None


def error_server(status: int, body: bytes = b"", hang: bool = False) -> tuple[str, Callable[[], None]]:
    handler = type("H", (_Answer,), {"status": status, "body": body or _Answer.body, "hang": hang})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", lambda: (server.shutdown(), server.server_close())


def s3_storage(endpoint: str, root: str = "s3://rlops-probe/root") -> object:
    from rlops.storage.backend import Storage

    return Storage(root, endpoint_url=endpoint, retries=2, backoff_s=0.01, connect_timeout_s=1.0, read_timeout_s=1.0)


OPS: dict[str, Callable[[object], object]] = {
    "list": lambda s: s.list("s3://rlops-probe/root/landing/scenario=x"),  # type: ignore[attr-defined]
    "read": lambda s: s.read_bytes("s3://rlops-probe/root/a.json"),  # type: ignore[attr-defined]
    "write": lambda s: s.write_bytes("s3://rlops-probe/root/a.json", b"{}"),  # type: ignore[attr-defined]
    "stream": lambda s: s.open_stream("s3://rlops-probe/root/a.jsonl").__enter__(),  # type: ignore[attr-defined]
}


def s3_fault(name: str, make: Callable[[], tuple[str, Callable[[], None]]], op: str) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        endpoint, stop = make()
        try:
            return expect_error(
                lambda: OPS[op](s3_storage(endpoint)), 1, ["rlops-probe", op if op != "stream" else "open"]
            )
        finally:
            stop()

    return IOProbe(f"s3_{name}_{op}", run, timeout_s=30)


def _closed() -> tuple[str, Callable[[], None]]:
    return f"http://127.0.0.1:{closed_port()}", lambda: None


SERVERS: dict[str, Callable[[], tuple[str, Callable[[], None]]]] = {
    "closed_port": _closed,
    "answers_500": lambda: error_server(500),
    "answers_503_slowdown": lambda: error_server(503, b"<Error><Code>SlowDown</Code></Error>"),
    "answers_404_everything": lambda: error_server(404, b"<Error><Code>NoSuchBucket</Code></Error>"),
    "answers_403": lambda: error_server(403, b"<Error><Code>AccessDenied</Code></Error>"),
    "answers_garbage_200": lambda: error_server(200, b"\x00\x01 not xml at all"),
    "never_answers": lambda: error_server(200, hang=True),
}

S3_PROBES = [
    s3_fault(name, make, op)
    for name, make in SERVERS.items()
    for op in ("list", "read", "write")
    if not (name == "answers_garbage_200" and op in ("write", "read"))
]  # any bytes are an object
S3_PROBES += [s3_fault("closed_port", _closed, "stream"), s3_fault("answers_500", SERVERS["answers_500"], "stream")]


def _garbage_200_write(tmp: Path) -> Verdict:
    # A 200 with a body that is not S3's: the write cannot be verified, so it must not count.
    endpoint, stop = error_server(200, b"\x00 not xml")
    try:
        return expect_error(lambda: OPS["write"](s3_storage(endpoint)), 1, ["rlops-probe"])
    finally:
        stop()


S3_PROBES.append(IOProbe("s3_answers_garbage_200_write", _garbage_200_write, timeout_s=30))


# --------------------------------------------------------------------------- moto (a real S3 API)


@pytest.fixture
def moto(moto_s3: str, moto_bucket: str) -> str:
    return moto_s3  # with the bucket rlops-test created


_MOTO: dict[str, str] = {}


def moto_probes() -> list[IOProbe]:
    """Probes against the moto server; the endpoint is read when a probe runs (the ``moto`` fixture)."""

    def missing_bucket_list(tmp: Path) -> Verdict:
        return expect_error(
            lambda: s3_storage(_MOTO["endpoint"], "s3://no-such-bucket/x").list(  # type: ignore[attr-defined]
                "s3://no-such-bucket/x/landing"
            ),
            1,
            ["no-such-bucket", "list"],
        )

    def missing_key_read(tmp: Path) -> Verdict:
        from rlops.storage.backend import StorageNotFoundError

        try:
            s3_storage(_MOTO["endpoint"], "s3://rlops-test/x").read_bytes("s3://rlops-test/x/none.json")  # type: ignore[attr-defined]
        except StorageNotFoundError as exc:
            return None if "none.json" in str(exc) else ("accepted", str(exc))
        return "accepted", "a missing object was read"

    def missing_folder_is_empty(tmp: Path) -> Verdict:
        got = s3_storage(_MOTO["endpoint"], "s3://rlops-test/x").list("s3://rlops-test/x/nothing-here")  # type: ignore[attr-defined]
        return None if got == [] else ("accepted", f"{got}")

    def capture_from_missing_bucket(tmp: Path) -> Verdict:
        from rlops.pipeline_steps.capture.core import capture_landing_zone

        from .capture_kit import END, SCENARIO, START, contract

        storage = s3_storage(_MOTO["endpoint"], "s3://rlops-test/x")
        return expect_error(
            lambda: capture_landing_zone(
                storage,
                "s3://no-such-landing",
                "s3://rlops-test/x/traces",  # type: ignore[arg-type]
                SCENARIO,
                contract(),
                START,
                END,
            ),
            1,
            ["no-such-landing"],
        )

    def capture_reads_gz_from_s3(tmp: Path) -> Verdict:
        import gzip

        from rlops.pipeline_steps.capture.core import capture_landing_zone

        from .capture_kit import END, SCENARIO, START, contract

        storage = s3_storage(_MOTO["endpoint"], "s3://rlops-test/x")
        key = f"s3://rlops-test/x/landing/scenario={SCENARIO}/date=2026-01-05/hour=10/20260105T100500000000Z-a-1-0.JSONL.gz"
        storage.write_bytes(key, gzip.compress((line(0, "s3") + "\n" + line(1, "s3") + "\n").encode()))  # type: ignore[attr-defined]
        res = capture_landing_zone(
            storage,
            "s3://rlops-test/x/landing",
            "s3://rlops-test/x/traces",  # type: ignore[arg-type]
            SCENARIO,
            contract(),
            START,
            END,
        )
        return None if (res.rows_in, res.rows_accepted) == (2, 2) else ("lost", f"{res}")

    return [
        IOProbe("moto_missing_bucket_list", missing_bucket_list, 30),
        IOProbe("moto_missing_key_read", missing_key_read, 30),
        IOProbe("moto_missing_folder_lists_empty", missing_folder_is_empty, 30),
        IOProbe("moto_capture_missing_landing_bucket", capture_from_missing_bucket, 60),
        IOProbe("moto_capture_reads_gz_upper_case", capture_reads_gz_from_s3, 60),
    ]


# --------------------------------------------------------------------------- the command line


def cli_fault(id: str, env: Callable[[Path], dict[str, str]], argv: list[str], mentions: tuple[str, ...]) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        with mock.patch.dict(os.environ, env(tmp)):
            return expect_cli_error(argv, 1, mentions)

    return IOProbe(f"cli_{id}", run, timeout_s=90)


def _s3_env(make: Callable[[], tuple[str, Callable[[], None]]]) -> Callable[[Path], dict[str, str]]:
    def env(tmp: Path) -> dict[str, str]:
        endpoint, _ = make()  # the server threads are daemons: they end with the test process
        return {
            "RLOPS_STORAGE_ROOT": "s3://rlops-probe/root",
            "RLOPS_S3_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "probe",
            "AWS_SECRET_ACCESS_KEY": "probe",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    return env


CAPTURE = ["capture", "--landing-zone", "--run-key", "20260105T1000"]
CLI_PROBES = [
    cli_fault(
        "capture_storage_closed_port", _s3_env(_closed), CAPTURE, ("storage", "rlops-probe", "Could not connect")
    ),
    cli_fault(
        "capture_storage_answers_404", _s3_env(SERVERS["answers_404_everything"]), CAPTURE, ("storage", "rlops-probe")
    ),
    cli_fault("capture_storage_answers_500", _s3_env(SERVERS["answers_500"]), CAPTURE, ("storage", "500")),
    cli_fault("capture_storage_answers_403", _s3_env(SERVERS["answers_403"]), CAPTURE, ("storage", "403")),
]


# --------------------------------------------------------------------------- local faults


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[dict[str, Path | str]]:
    """A read-only bind mount and a 64 KiB tmpfs, or the reason they cannot be made here."""
    out: dict[str, Path | str] = {}
    made: list[Path] = []
    ro, tiny = tmp_path / "ro", tmp_path / "tiny"
    ro.mkdir()
    tiny.mkdir()
    (ro / "landing").mkdir()
    try:
        subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True, capture_output=True, timeout=10)
        made.append(ro)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True, timeout=10)
        out["ro"] = ro
    except (OSError, subprocess.SubprocessError) as exc:
        out["ro"] = f"a read-only bind mount is not permitted here ({exc})"
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tiny)], check=True, capture_output=True, timeout=10
        )
        made.append(tiny)
        out["tiny"] = tiny
    except (OSError, subprocess.SubprocessError) as exc:
        out["tiny"] = f"a tmpfs cannot be mounted here ({exc})"
    yield out
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)


def local_probes(mounts: dict[str, Path | str]) -> tuple[list[IOProbe], list[str]]:
    from rlops.storage.backend import Storage

    probes, skipped = [], []
    ro, tiny = mounts["ro"], mounts["tiny"]

    def file_root(tmp: Path) -> Verdict:
        (tmp / "root").write_text("a file where the storage root folder should be")
        return expect_error(
            lambda: Storage(f"file://{tmp / 'root'}").write_json(f"file://{tmp / 'root' / 'a.json'}", {}),
            1,
            ["write", "root/a.json"],
        )

    probes.append(IOProbe("local_root_is_a_file", file_root))

    def dir_as_file(tmp: Path) -> Verdict:
        (tmp / "a.json").mkdir()
        return expect_error(lambda: Storage(f"file://{tmp}").read_json(f"file://{tmp / 'a.json'}"), 1, ["a.json"])

    probes.append(IOProbe("local_read_a_folder", dir_as_file))

    if isinstance(ro, Path):

        def ro_write(tmp: Path) -> Verdict:
            return expect_error(
                lambda: Storage(f"file://{ro}").write_bytes(f"file://{ro}/x/a.bin", b"1"), 1, ["write", "Read-only"]
            )

        def ro_capture(tmp: Path) -> Verdict:
            from rlops.pipeline_steps.capture.core import capture_landing_zone

            from .capture_kit import END, SCENARIO, START, contract

            write_file(tmp, [line(0, "a")])
            return expect_error(
                lambda: capture_landing_zone(
                    Storage(f"file://{tmp}"),
                    f"file://{tmp / 'landing'}",
                    f"file://{ro}/traces",
                    SCENARIO,
                    contract(),
                    START,
                    END,
                ),
                1,
                ["Read-only", "traces"],
            )

        probes += [IOProbe("readonly_write", ro_write), IOProbe("readonly_capture_target", ro_capture)]
    else:
        skipped.append(str(ro))
    if isinstance(tiny, Path):

        def full_write(tmp: Path) -> Verdict:
            storage = Storage(f"file://{tiny}")
            verdict = expect_error(
                lambda: storage.write_bytes(f"file://{tiny}/big.bin", os.urandom(1 << 20)),
                1,
                ["write", "No space left"],
            )
            left = [p.name for p in tiny.iterdir()]
            return verdict or (None if not left else ("lost", f"a failed write left {left}"))

        def full_capture(tmp: Path) -> Verdict:
            write_file(tmp, [line(i, "big", extra={"pad": secrets.token_hex(1000)}) for i in range(200)])
            from rlops.pipeline_steps.capture.core import capture_landing_zone

            from .capture_kit import END, SCENARIO, START, contract

            verdict = expect_error(
                lambda: capture_landing_zone(
                    Storage(f"file://{tmp}"),
                    f"file://{tmp / 'landing'}",
                    f"file://{tiny}/traces",
                    SCENARIO,
                    contract(),
                    START,
                    END,
                    quarantine_root_uri=f"file://{tiny}/quarantine",
                ),
                1,
                ["No space left"],
            )
            hidden = [p.name for p in tiny.rglob(".tmp-*")]
            return verdict or (None if not hidden else ("lost", f"half-written files left: {hidden}"))

        probes += [IOProbe("disk_full_write", full_write), IOProbe("disk_full_capture", full_capture)]
    else:
        skipped.append(str(tiny))
    return probes, skipped


FIXED_PROBES = [*S3_PROBES, *CLI_PROBES]
MOTO_PROBES = moto_probes()
LOCAL_PROBES = [
    "local_root_is_a_file",
    "local_read_a_folder",
    "readonly_write",
    "readonly_capture_target",
    "disk_full_write",
    "disk_full_capture",
]


@pytest.mark.parametrize("probe", FIXED_PROBES, ids=ids(FIXED_PROBES))
def test_fault_probe(probe: IOProbe, tmp_path: Path) -> None:
    check(run_probe(probe, tmp_path))


@pytest.mark.parametrize("probe", MOTO_PROBES, ids=ids(MOTO_PROBES))
def test_moto_fault_probe(probe: IOProbe, moto: str, tmp_path: Path) -> None:
    _MOTO["endpoint"] = moto
    check(run_probe(probe, tmp_path))


@pytest.mark.parametrize("name", LOCAL_PROBES)
def test_local_fault_probe(name: str, mounts: dict[str, Path | str], tmp_path: Path) -> None:
    probes, skipped = local_probes(mounts)
    found = [p for p in probes if p.id == name]
    if not found:
        pytest.skip("; ".join(skipped))
    check(run_probe(found[0], tmp_path))

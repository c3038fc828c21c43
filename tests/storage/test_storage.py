"""Storage: round-trips on local files and on S3 (moto server over HTTP), atomicity, retries."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pandas as pd
import pytest

from rlops.common.config import load_params
from rlops.storage.backend import Storage, StorageError, StorageNotFoundError, get_storage, normalize_uri
from rlops.trace_store.store import partition_path


@pytest.fixture(params=["file", "s3"])
def storage(request: pytest.FixtureRequest, tmp_storage_root: str) -> Storage:
    if request.param == "file":
        return get_storage(tmp_storage_root, retries=2, backoff_s=0.001)
    bucket = request.getfixturevalue("moto_bucket")
    endpoint = request.getfixturevalue("moto_s3")
    return get_storage(f"{bucket}/root", endpoint_url=endpoint, retries=2, backoff_s=0.001)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bytes_text_json_roundtrip(storage: Storage) -> None:
    uri = storage.join("a", "b", "blob.bin")
    assert storage.write_bytes(uri, b"\x00\x01payload") == uri
    assert storage.read_bytes(uri) == b"\x00\x01payload"
    storage.write_text(storage.join("t.txt"), "héllo")
    assert storage.read_text(storage.join("t.txt")) == "héllo"
    storage.write_json(storage.join("j.json"), {"k": [1, 2], "n": None})
    assert storage.read_json(storage.join("j.json")) == {"k": [1, 2], "n": None}
    assert storage.exists(uri) and not storage.exists(storage.join("missing.bin"))
    with pytest.raises(StorageNotFoundError, match="missing.bin"):
        storage.read_bytes(storage.join("missing.bin"))


def test_overwrite_replaces_whole_object(storage: Storage) -> None:
    uri = storage.join("x.txt")
    storage.write_text(uri, "a much longer first version")
    storage.write_text(uri, "short")
    assert storage.read_text(uri) == "short"


def test_list_recursive_with_suffix_and_delete_prefix(storage: Storage) -> None:
    for name in ("p/date=1/a.parquet", "p/date=1/b.json", "p/date=2/c.parquet", "pq/other.parquet"):
        storage.write_bytes(storage.join(name), b"x")
    under_p = storage.list(storage.join("p"))
    assert under_p == sorted(storage.join(n) for n in ("p/date=1/a.parquet", "p/date=1/b.json", "p/date=2/c.parquet"))
    assert storage.list(storage.join("p"), suffix=".parquet") == [
        storage.join("p/date=1/a.parquet"),
        storage.join("p/date=2/c.parquet"),
    ]
    assert storage.list(storage.join("nothing-here")) == []
    assert storage.delete_prefix(storage.join("p", "date=1")) == 2
    assert storage.list(storage.join("p")) == [storage.join("p/date=2/c.parquet")]
    assert storage.delete_prefix(storage.join("p", "date=1")) == 0  # idempotent
    assert storage.exists(storage.join("pq/other.parquet"))  # sibling with same name prefix kept


def test_parquet_single_file_and_partitioned_prefix(storage: Storage) -> None:
    df1 = pd.DataFrame({"episode_id": ["e1", "e2"], "reward_total": [1.5, -0.5]})
    df2 = pd.DataFrame({"episode_id": ["e3"], "reward_total": [2.0]})
    base = storage.join("traces", "scenario=credit")
    storage.write_parquet(f"{base}/{partition_path(date='2026-01-01', hour=3)}/part-0.parquet", df1)
    storage.write_parquet(f"{base}/{partition_path(date='2026-01-01', hour=4)}/part-0.parquet", df2)
    one = storage.read_parquet(f"{base}/date=2026-01-01/hour=03/part-0.parquet")
    pd.testing.assert_frame_equal(one, df1)
    both = storage.read_parquet(base).sort_values("episode_id").reset_index(drop=True)
    assert both["episode_id"].tolist() == ["e1", "e2", "e3"]
    assert both["hour"].tolist() == ["03", "03", "04"]
    assert set(both["date"]) == {"2026-01-01"}
    assert storage.read_parquet(base, columns=["reward_total"]).shape == (3, 1)
    with pytest.raises(StorageNotFoundError, match="no parquet"):
        storage.read_parquet(storage.join("traces", "scenario=none"))


def test_upload_download_and_local_path(storage: Storage, tmp_path: Path) -> None:
    src = tmp_path / "ckpt.pt"
    src.write_bytes(b"weights" * 1000)
    uri = storage.upload_file(src, storage.join("ckpt", "model.pt"))
    dst = storage.download_file(uri, tmp_path / "out" / "model.pt")
    assert dst.read_bytes() == src.read_bytes()
    with storage.local_path(uri) as p:
        assert p.read_bytes() == src.read_bytes()
    with pytest.raises(StorageNotFoundError):
        storage.upload_file(tmp_path / "nope.pt", storage.join("ckpt", "nope.pt"))


def test_open_stream_reads_lines(storage: Storage) -> None:
    lines = [f'{{"step": {i}}}' for i in range(5000)]
    uri = storage.join("landing", "batch.jsonl")
    storage.write_text(uri, "\n".join(lines) + "\n")
    with storage.open_stream(uri) as fh:
        got = [line.rstrip("\n") for line in fh]
    assert got == lines


def test_local_atomic_write_leaves_no_temp_files(tmp_storage_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = get_storage(tmp_storage_root)
    uri = storage.join("part", "data.bin")
    storage.write_bytes(uri, b"old")
    folder = Path(uri[len("file://") :]).parent

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("rlops.storage.backend.os.replace", boom)
    with pytest.raises(StorageError, match="disk full"):
        storage.write_bytes(uri, b"new")
    monkeypatch.undo()
    assert storage.read_bytes(uri) == b"old"
    assert [p.name for p in folder.iterdir()] == ["data.bin"]


def test_endpoint_down_retries_then_clear_error(moto_s3: str, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    storage = get_storage("s3://rlops-test/root", endpoint_url=endpoint, retries=3, backoff_s=0.001)
    calls: list[str] = []
    storage.s3_client.meta.events.register("before-call.s3.*", lambda model, **_: calls.append(model.name))
    src = tmp_path / "traces.jsonl"
    src.write_bytes(b'{"a": 1}\n' * 100)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()

    with pytest.raises(StorageError) as info:
        storage.write_bytes(storage.join("x.bin"), b"data")
    assert calls == ["PutObject"] * 3 and info.value.attempts == 3
    msg = str(info.value)
    assert "write" in msg and "s3://rlops-test/root/x.bin" in msg and endpoint in msg
    assert "3 attempt(s)" in msg

    calls.clear()
    with pytest.raises(StorageError, match="upload failed"):
        storage.upload_file(src, storage.join("traces.jsonl"))
    assert len([c for c in calls if c == "PutObject"]) == 3
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest  # the source is untouched


def test_permanent_errors_are_not_retried(moto_s3: str) -> None:
    storage = get_storage("s3://no-such-bucket/root", endpoint_url=moto_s3, retries=3, backoff_s=0.001)
    calls: list[str] = []
    storage.s3_client.meta.events.register("before-call.s3.PutObject", lambda **_: calls.append("put"))
    with pytest.raises(StorageNotFoundError, match="bucket 'no-such-bucket' does not exist") as nf:
        storage.write_bytes(storage.join("x"), b"1")
    assert calls == ["put"] and nf.value.attempts == 1
    bad = get_storage("s3://bad!bucket/root", endpoint_url=moto_s3, retries=3, backoff_s=0.001)
    with pytest.raises(StorageError, match="not transient") as info:
        bad.write_bytes(bad.join("x"), b"1")
    assert info.value.attempts == 1


def test_join_normalize_and_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    assert normalize_uri("file://rel/dir") == f"file://{tmp_path}/rel/dir"
    assert normalize_uri("rel") == f"file://{tmp_path}/rel"
    assert normalize_uri("s3://b/k/") == "s3://b/k"
    with pytest.raises(ValueError, match="unsupported"):
        normalize_uri("gs://b/k")
    s = Storage("s3://bucket/pre")
    assert s.join("a/", "/b", "c.txt") == "s3://bucket/pre/a/b/c.txt"
    with pytest.raises(ValueError, match="escapes"):
        s.join("..", "x")
    with pytest.raises(ValueError, match="refusing"):
        s.delete_prefix("s3://bucket")
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", "s3://from-env/data")
    monkeypatch.setenv("RLOPS_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    p = Storage.from_params(load_params())
    assert (p.root, p.endpoint_url) == ("s3://from-env/data", "http://127.0.0.1:9")
    assert partition_path(scenario="a", date="2026-01-01", hour=7) == "scenario=a/date=2026-01-01/hour=07"


def test_ensure_root_creates_bucket_and_folder(moto_s3: str, tmp_path: Path) -> None:
    s3 = get_storage("s3://fresh-bucket/data", endpoint_url=moto_s3, retries=1)
    s3.ensure_root()
    s3.ensure_root()  # idempotent
    s3.write_text(s3.join("ok.txt"), "ok")
    assert s3.list("s3://fresh-bucket") == ["s3://fresh-bucket/data/ok.txt"]
    local = get_storage(f"file://{tmp_path}/deep/root")
    local.ensure_root()
    assert (tmp_path / "deep" / "root").is_dir()

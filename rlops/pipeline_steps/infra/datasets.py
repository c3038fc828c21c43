"""Data lineage in MLflow's own terms: trace partitions and calibration files as MLflow datasets.

A :class:`DatasetRef` describes one input a run read — where it lives (source URI), what it
holds (a content digest, a row count, a column schema) — and :func:`log_dataset_inputs`
attaches it to a run as an MLflow dataset input with a context (``training``, ``evaluation``,
``calibration``…), so the UI's Dataset column and a run's Inputs show what each policy was
trained and evaluated on. The digest is over the bytes of the files, so the same partition
logged by two runs is one dataset in MLflow.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.registry.run_handle import RunHandle
    from rlops.storage.backend import Storage

TRAINING, EVALUATION, CALIBRATION, DRIFT = "training", "evaluation", "calibration", "drift"


@dataclass(frozen=True)
class DatasetRef:
    """One dataset a run read: name, source URI, content digest, row count and column schema."""

    name: str
    uri: str
    digest: str
    rows: int
    schema: tuple[tuple[str, str], ...]
    files: int = 1

    def to_entity(self) -> Any:
        from mlflow.entities import Dataset

        source_type = self.uri.split("://", 1)[0] if "://" in self.uri else "local"
        schema = {"mlflow_colspec": [{"name": n, "type": t} for n, t in self.schema]}
        return Dataset(
            name=self.name,
            digest=self.digest,
            source_type=source_type,
            source=json.dumps({"uri": self.uri}),
            schema=json.dumps(schema),
            profile=json.dumps({"num_rows": self.rows, "num_files": self.files}),
        )


def _arrow_type(t: Any) -> str:
    """MLflow colspec type names for the arrow types trace partitions use."""
    s = str(t)
    if s.startswith(("int", "uint")):
        return "long"
    if s in ("double", "float", "halffloat"):
        return "double"
    if s == "bool":
        return "boolean"
    if s.startswith("timestamp"):
        return "datetime"
    return "string"


def parquet_dataset(storage: Storage, uri: str, name: str) -> DatasetRef | None:
    """A parquet file, or every ``.parquet`` file under a folder, as one dataset; None when
    there is no file (a step that read nothing has no input to record)."""
    import pyarrow.parquet as pq

    if uri.endswith(".parquet"):
        files = [uri] if storage.exists(uri) else []
    else:
        files = sorted(storage.list(uri, suffix=".parquet"))
    if not files:
        return None
    h, rows, schema = hashlib.sha256(), 0, None
    for f in files:
        data = storage.read_bytes(f)
        h.update(hashlib.sha256(data).digest())
        meta = pq.ParquetFile(io.BytesIO(data))
        rows += meta.metadata.num_rows
        schema = schema or meta.schema_arrow
    cols = tuple((fld.name, _arrow_type(fld.type)) for fld in schema) if schema is not None else ()
    return DatasetRef(name=name, uri=uri, digest=h.hexdigest()[:16], rows=rows, schema=cols, files=len(files))


def calibration_dataset(storage: Storage, uri: str, name: str) -> DatasetRef | None:
    """A sandbox calibration file as a dataset: rows = the trace rows it was fitted on, schema =
    the fitted state fields."""
    if not storage.exists(uri):
        return None
    data = storage.read_bytes(uri)
    cal = json.loads(data)
    fields = tuple((str(path), "distribution") for path in sorted(cal.get("fields") or {}))
    rows = int((cal.get("fit") or {}).get("rows") or 0)
    return DatasetRef(name=name, uri=uri, digest=hashlib.sha256(data).hexdigest()[:16], rows=rows, schema=fields)


def log_dataset_inputs(run: RunHandle, refs: list[DatasetRef | None], context: str) -> list[DatasetRef]:
    """Attach ``refs`` (Nones skipped) to ``run`` as dataset inputs with ``context``."""
    from mlflow.entities import DatasetInput, InputTag

    kept = [r for r in refs if r is not None]
    if kept:
        inputs = [DatasetInput(r.to_entity(), tags=[InputTag("mlflow.data.context", context)]) for r in kept]
        run.log_inputs(inputs)
    return kept

"""What a run read, measured from storage: trace partitions and calibration files as
:class:`~rlops.registry.datasets.DatasetRef` (a content digest, a row count, a column schema),
which :func:`rlops.registry.datasets.log_dataset_inputs` attaches to the run as MLflow dataset
inputs, with one of the contexts below.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import TYPE_CHECKING, Any

from rlops.registry.datasets import DatasetRef

if TYPE_CHECKING:
    from rlops.storage.backend import Storage

TRAINING, EVALUATION, CALIBRATION, DRIFT = "training", "evaluation", "calibration", "drift"


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

"""Data lineage in MLflow's own terms: what a run read, attached to it as MLflow dataset inputs.

A :class:`DatasetRef` describes one input a run read — where it lives (source URI), what it
holds (a content digest, a row count, a column schema) — and :func:`log_dataset_inputs`
attaches it to a run as an MLflow dataset input with a context (``training``, ``evaluation``,
``calibration``…), so the UI's Dataset column and a run's Inputs show what each policy was
trained and evaluated on. The digest is over the bytes of the files, so the same partition
logged by two runs is one dataset in MLflow. The references are measured from storage by
:mod:`rlops.pipeline_steps.infra.datasets`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.registry.run_handle import RunHandle


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
        """The MLflow ``Dataset`` entity of this reference."""
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


def log_dataset_inputs(run: RunHandle, refs: list[DatasetRef | None], context: str) -> list[DatasetRef]:
    """Attach ``refs`` (Nones skipped) to ``run`` as dataset inputs with ``context``."""
    from mlflow.entities import DatasetInput, InputTag

    kept = [r for r in refs if r is not None]
    if kept:
        inputs = [DatasetInput(r.to_entity(), tags=[InputTag("mlflow.data.context", context)]) for r in kept]
        run.log_inputs(inputs)
    return kept

"""The stream MLflow's own log handlers write to, for :func:`rlops.common.progress.route_library_output`
(the base layer names no library above it: ``rlops.registry`` registers this stream when imported)."""

from __future__ import annotations


def mlflow_log_stream() -> object:
    """MLflow's own stderr stream; importing MLflow here installs the handlers that write to it."""
    from mlflow.utils.logging_utils import MLFLOW_LOGGING_STREAM

    return MLFLOW_LOGGING_STREAM

"""The model registry and experiment tracking, all MLflow access in one package.

* :mod:`rlops.registry.client` — :class:`~rlops.registry.client.Tracker`: experiments, runs,
  registered models, versions and aliases (``champion``, ``challenger``, ``previous``), retries and
  errors; the registered models' names (:func:`~rlops.registry.client.policy_model_name`);
* :mod:`rlops.registry.mlflow_calls` — the MLflow client calls behind the tracker's methods that
  read an absent model or alias as empty and take a concurrently created one as found;
* :mod:`rlops.registry.alias_records` — rlops' own alias moves, signed with the deployment's
  registry key, so a hand-set alias cannot pass for one and a process with another key refuses
  to act instead of undoing rlops' moves;
* :mod:`rlops.registry.aliases` — ``champion`` and ``previous`` moved as one step, the champion's
  history and the roll-back;
* :mod:`rlops.registry.tags` — every tag name rlops writes on runs and versions;
* :mod:`rlops.registry.versions` — the newest version of a registered model, a version's files;
* :mod:`rlops.registry.descriptions` — what the MLflow UI shows of a registered model and a version;
* :mod:`rlops.registry.run_handle` — a run being written (params, metrics, artifacts, buffered);
* :mod:`rlops.registry.runs` — runs found by their tags, read back and ended (a pass's parent run,
  the runs of a killed process, a training's metrics);
* :mod:`rlops.registry.datasets` — what a run read, as MLflow dataset inputs;
* :mod:`rlops.registry.traces` — the traces an agent logged to MLflow, page by page;
* :mod:`rlops.registry.mlflow_logging` — the stream MLflow's own log handlers write to;
* :mod:`rlops.registry.webhooks` — the MLflow webhook that calls rlops' promotion receiver;
* :mod:`rlops.registry.pyfunc_policy` — a policy saved as an MLflow pyfunc model.

Outside this package only the agent SDK (:mod:`rlops.agent_sdk`) and the console
(:mod:`rlops.console`) may import MLflow, each for the reason its package documentation gives.
"""

from rlops.common.progress import register_library_stream
from rlops.registry.mlflow_logging import mlflow_log_stream

# A task routes library output before or after it first uses the registry: either way MLflow's
# lines then reach the task log through logging (the base layer cannot name MLflow itself).
register_library_stream(mlflow_log_stream)

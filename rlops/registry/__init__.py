"""The model registry and experiment tracking, all MLflow access in one package.

* :mod:`rlops.registry.client` — :class:`~rlops.registry.client.Tracker`: experiments, runs,
  registered models, versions and aliases (``champion``, ``challenger``, ``previous``), retries and
  errors; the registered models' names (:func:`~rlops.registry.client.policy_model_name`);
* :mod:`rlops.registry.alias_records` — rlops' own alias moves, signed with the deployment's
  registry key, so a hand-set alias cannot pass for one and a process with another key refuses
  to act instead of undoing rlops' moves;
* :mod:`rlops.registry.aliases` — ``champion`` and ``previous`` moved as one step, the champion's
  history and the roll-back;
* :mod:`rlops.registry.tags` — every tag name rlops writes on runs and versions;
* :mod:`rlops.registry.versions` — the newest version of a registered model;
* :mod:`rlops.registry.descriptions` — what the MLflow UI shows of a registered model and a version;
* :mod:`rlops.registry.run_handle` — a run being written (params, metrics, artifacts, buffered);
* :mod:`rlops.registry.pyfunc_policy` — a policy saved as an MLflow pyfunc model.
"""

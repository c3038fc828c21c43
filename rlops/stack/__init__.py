"""The one-machine deployment: ``rlops stack up|status|down`` (:mod:`rlops.stack.control`).

Entry points: :func:`~rlops.stack.control.up`, :func:`~rlops.stack.control.status`,
:func:`~rlops.stack.control.down`. The parts and their settings are in :mod:`rlops.stack.parts`,
what is created once in :mod:`rlops.stack.home` (secrets, state) and :mod:`rlops.stack.airflow_setup`
(database, pools, unpaused DAGs, the MLflow webhook).
"""

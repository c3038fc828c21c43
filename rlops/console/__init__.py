"""``rlops console``: a read-only web console over the registry (MLflow) and the trace store.

See docs/console.md. ``rlops.console.cli`` registers the command with argparse only; the web
application (``rlops.console.app``) and its data access (``rlops.console.data``) load when it runs.

MLflow: the console is the top layer and only reads. Its views read the tracking server directly
(runs, registered models, versions and aliases, through the tracker's MLflow client), so its modules
may import ``mlflow`` for those reads; every write to the registry goes through
:mod:`rlops.registry`.
"""

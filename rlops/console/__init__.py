"""``rlops console``: a read-only web console over the registry (MLflow) and the trace store.

See docs/console.md. ``rlops.console.cli`` registers the command with argparse only; the web
application (``rlops.console.app``) and its data access (``rlops.console.data``) load when it runs.
"""

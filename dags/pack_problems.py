"""
### pack_problems — the packs that get no DAGs, shown as this file's import error

A pack folder whose name is no scenario name, whose `scenario.yaml` or reward modules are broken
(a folder, not YAML, another pack's `name:`, a module that does not compile) or whose params do not
validate gets no DAGs; every other pack keeps its own. This file defines no DAG: it raises, naming
each such pack, its file and what is wrong — or a scenarios folder that is missing — so Airflow
shows the problem as an import error (`rlops stack status`, the console's front page) instead of
the pack's DAGs silently missing.
"""

from rlops.pipeline_steps.orchestration.settings import raise_pack_problems

raise_pack_problems()

"""A business signal set as an Airflow Variable reaches the signal store from inside a task (the
drift monitor's feed), accepted or refused with the same checks as ``rlops signal set``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT

DAG_FILE = """
from datetime import UTC, datetime

from airflow.sdk import dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False)
def feed_signals():
    @task
    def feed() -> list:
        from rlops.pipeline_steps.infra.context import StepContext
        from rlops.pipeline_steps.infra.signal_store import feed_airflow_variables, pack_declarations
        from rlops.sandbox.pack import load_pack

        ctx = StepContext.create("credit_approval")
        pack = load_pack(ctx.pack_dir, check_liveness=False)
        return feed_airflow_variables(ctx.storage, ctx.config.signals, pack_declarations(pack.name, pack.reward_fns))

    feed()


feed_signals()
"""


@pytest.mark.slow  # three DAG runs
def test_a_variable_is_offered_from_a_task(airflow_db: str, rlops_home: Path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models import Variable

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.signal_store import SignalStore, pack_declarations
    from rlops.sandbox.pack import load_pack

    folder = rlops_home / "dags"
    folder.mkdir()
    (folder / "feed_signals.py").write_text(DAG_FILE)
    # dag.test() runs DAGs serialized to the metadata database, as the DAG processor would have
    bag = BundleDagBag(dag_folder=str(folder), bundle_path=str(folder), bundle_name="dags-folder")
    assert bag.import_errors == {}
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
    dag = bag.dags["feed_signals"]
    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    decls = pack_declarations(pack.name, pack.reward_fns)
    ctx = StepContext.create("credit_approval")
    store = SignalStore(ctx.storage, ctx.config.signals)
    try:
        Variable.set("rlops_signal_complaint_index", "0.35")
        assert str(dag.test().state) == "success"
        assert store.reading("complaint_index", decls).value == 0.35
        dag.test()  # unchanged: not offered again
        assert len(store.history("complaint_index")) == 1
        Variable.set("rlops_signal_complaint_index", "NaN")
        dag.test()
        r = store.reading("complaint_index", decls)
        assert (r.value, r.status) == (0.35, "last_good") and "not a finite number" in r.note
        assert [h.by for h in store.history("complaint_index")] == ["airflow:rlops_signal_complaint_index"] * 2
    finally:
        Variable.delete("rlops_signal_complaint_index")

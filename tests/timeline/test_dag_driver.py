"""The DAG driver's scheduling helpers: which DAGs are due, and the metadata sync that dag.test()
would repeat on every call."""

from __future__ import annotations

from datetime import datetime

import pytest

from rlops.timeline import dag_driver


def test_cron_schedules_and_presets_fire_at_their_minutes() -> None:
    assert dag_driver.is_due("*/15 * * * *", datetime(2026, 12, 1, 10, 45))
    assert not dag_driver.is_due("*/15 * * * *", datetime(2026, 12, 1, 10, 50))
    assert dag_driver.is_due("@hourly", datetime(2026, 12, 1, 11, 0))
    assert not dag_driver.is_due("@hourly", datetime(2026, 12, 1, 11, 15))
    assert not dag_driver.is_due(None, datetime(2026, 12, 1, 11, 0))
    with pytest.raises(TypeError, match="not a cron expression"):
        dag_driver.is_due(60, datetime(2026, 12, 1, 11, 0))


def test_the_dag_folder_is_synced_again_only_when_a_definition_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow.dag_processing.dagbag as dagbag_module

    calls: list[str] = []
    stamp = [("dags/retrain_full.py", 1, 100)]
    monkeypatch.setattr(dagbag_module, "sync_bag_to_db", lambda bag, name, version: calls.append(name))
    monkeypatch.setattr(dag_driver, "_definitions_stamp", lambda: tuple(stamp))
    synced: dict[str, tuple[object, ...]] = {}
    for _ in range(3):  # three dag.test() calls on unchanged definitions
        with dag_driver._synced_when_changed(synced):
            dagbag_module.sync_bag_to_db(object(), "dags-folder", None)
    assert calls == ["dags-folder"]
    stamp[0] = ("dags/retrain_full.py", 2, 104)  # a DAG file (or a pack, or params) edited
    with dag_driver._synced_when_changed(synced):
        dagbag_module.sync_bag_to_db(object(), "dags-folder", None)
    assert calls == ["dags-folder", "dags-folder"]
    assert dagbag_module.sync_bag_to_db.__name__ == "<lambda>"  # restored on leaving the context


def test_the_definitions_stamp_covers_the_dag_files_and_the_packs() -> None:
    names = [name for name, _, _ in dag_driver._definitions_stamp()]
    assert any(n.endswith("dags/retrain_full.py") for n in names)
    assert any(n.endswith("credit_approval/scenario.yaml") for n in names)
    assert any(n.endswith("params.yaml") for n in names)

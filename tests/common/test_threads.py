"""``train.threads``: ``auto`` gives each task of a worker its share of the CPUs the process may
use (affinity, cgroup quota), an integer pins the count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlops.common import threads
from rlops.common.threads import cgroup_cpu_limit, resolve_threads, set_torch_threads, usable_cpus, worker_slots

EIGHT = set(range(8))
NO_AIRFLOW: dict[str, str] = {}


def _cpu_max(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpu.max"
    path.write_text(text + "\n")
    return path


def test_the_cgroup_quota_counts_whole_cpus_and_max_is_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(_cpu_max(tmp_path, "200000 100000")) == 2
    assert cgroup_cpu_limit(_cpu_max(tmp_path, "150000 100000")) == 1  # 1.5 CPUs: a team of 2 would wait
    assert cgroup_cpu_limit(_cpu_max(tmp_path, "50000 100000")) == 1
    assert cgroup_cpu_limit(_cpu_max(tmp_path, "max 100000")) is None
    assert cgroup_cpu_limit(tmp_path / "absent") is None
    assert cgroup_cpu_limit(_cpu_max(tmp_path, "garbage")) is None


def test_usable_cpus_is_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    assert usable_cpus(_cpu_max(tmp_path, "200000 100000"), affinity=EIGHT) == 2
    assert usable_cpus(_cpu_max(tmp_path, "max 100000"), affinity=EIGHT) == 8
    assert usable_cpus(_cpu_max(tmp_path, "1600000 100000"), affinity={0, 1, 2}) == 3
    assert usable_cpus(tmp_path / "absent", affinity=EIGHT) == 8


def test_worker_slots_come_from_the_celery_concurrency_else_the_parallelism_else_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert worker_slots(NO_AIRFLOW) == 1
    assert worker_slots({"AIRFLOW__CORE__PARALLELISM": "4"}) == 4
    both = {"AIRFLOW__CELERY__WORKER_CONCURRENCY": "2", "AIRFLOW__CORE__PARALLELISM": "32"}
    assert worker_slots(both) == 2  # a Celery worker runs its own concurrency, whatever the scheduler's
    assert worker_slots({"AIRFLOW__CORE__PARALLELISM": "0"}) == 1
    assert worker_slots({"AIRFLOW__CORE__PARALLELISM": "lots"}) == 1
    # Inside an Airflow task without the variables: Airflow's configured value (default 32 for a LocalExecutor)
    monkeypatch.setattr(threads, "_airflow_configured_slots", lambda: 32)
    assert worker_slots({"AIRFLOW_CTX_DAG_ID": "retrain_full__credit_approval"}) == 32
    assert worker_slots(NO_AIRFLOW) == 1  # a CLI run is one process on its own


def test_auto_divides_the_cpus_among_the_workers_tasks(tmp_path: Path) -> None:
    quota2, unlimited = _cpu_max(tmp_path, "200000 100000"), tmp_path / "absent"

    def auto(environ: dict[str, str], cpu_max: Path = unlimited, current: int = 64) -> int:
        return resolve_threads("auto", current=current, environ=environ, cpu_max=cpu_max, affinity=EIGHT)

    assert auto(NO_AIRFLOW) == 8
    assert auto({"AIRFLOW__CORE__PARALLELISM": "4"}) == 2
    assert auto({"AIRFLOW__CORE__PARALLELISM": "32"}) == 1  # at least one
    assert auto({"AIRFLOW__CELERY__WORKER_CONCURRENCY": "3"}) == 2
    assert auto(NO_AIRFLOW, cpu_max=quota2) == 2  # a container limited to 2 CPUs of a bigger host
    assert auto({"AIRFLOW__CORE__PARALLELISM": "2"}, cpu_max=quota2) == 1
    assert auto(NO_AIRFLOW, current=1) == 1  # a process that lowered torch's count keeps it


def test_an_integer_pins_the_count_and_anything_else_is_refused() -> None:
    assert resolve_threads(3, current=1, environ={"AIRFLOW__CORE__PARALLELISM": "32"}) == 3
    assert resolve_threads("2", current=8) == 2
    for bad in (0, -1, "many"):
        with pytest.raises(ValueError, match="expected 'auto' or an integer >= 1"):
            resolve_threads(bad)


def test_the_params_accept_auto_or_a_positive_count() -> None:
    from pydantic import ValidationError

    from rlops.common.params_training import TrainParams

    assert TrainParams().threads == "auto"
    assert TrainParams(threads=2).threads == 2
    for bad in (0, "some"):
        with pytest.raises(ValidationError):
            TrainParams(threads=bad)


def test_set_torch_threads_sets_the_intra_op_count() -> None:
    before = torch.get_num_threads()
    try:
        set_torch_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_every_dag_task_takes_its_share_of_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only PPO: the reward model, evaluation and stress tests of a task run on the same threads."""
    from rlops.pipeline_steps.orchestration.task_runtime import no_retry_on_user_error

    before = torch.get_num_threads()
    monkeypatch.setenv("AIRFLOW__CORE__PARALLELISM", "64")  # more tasks than this machine has CPUs
    try:
        torch.set_num_threads(2)
        seen = no_retry_on_user_error(lambda: torch.get_num_threads())()
        assert seen == 1
    finally:
        torch.set_num_threads(before)

"""What every Airflow task function shares: bad input fails at once (no retries), torch gets the
task's share of the CPUs, MLflow's lines reach the task log at their level, and a task can end as
*skipped* with its result kept."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rlops.common.config import resolve_params
from rlops.common.errors import UserError
from rlops.common.progress import route_library_output
from rlops.common.threads import resolve_threads, set_torch_threads

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class ConfError(UserError):
    """A DAG run's conf that cannot be used; the first task fails with this message."""


class PromotionFailed(RuntimeError):
    """MLflow or storage failed during a promotion (the aliases are as they were): the task fails and
    Airflow retries it."""


@functools.cache
def _failing_without_retry(cls: type[UserError]) -> type[UserError]:
    """``cls`` that Airflow also reads as ``AirflowFailException``: the task fails at once."""
    from airflow.sdk.exceptions import AirflowFailException

    return type(cls.__name__, (cls, AirflowFailException), {"__module__": cls.__module__, "fails_without_retry": True})


def fit_torch_threads() -> int:
    """Set this task process's torch threads from params ``train.threads`` (``auto``: the CPUs the
    process may use divided by the tasks its worker runs at once, see :mod:`rlops.common.threads`)."""
    n = resolve_threads(resolve_params().model.train.threads)
    set_torch_threads(n)
    return n


def no_retry_on_user_error(fn: F) -> F:
    """Bad input (a conf, a pack, a file) fails the task without Airflow's retries: retrying cannot
    mend it, and the run should say so at once. The error keeps its class (a ``ConfError`` is
    still one) and its message; other errors (storage, tracking server) keep their retries."""

    @functools.wraps(fn)
    def task(*args: Any, **kwargs: Any) -> Any:
        # Every task enters here: MLflow's lines must reach the task log at their level, not as
        # the ERRORs Airflow makes of anything written to stderr; and torch gets the task's share of
        # the CPUs before any step runs (the reward model, evaluation and stress tests stall on a
        # busy worker just as PPO does when an OpenMP team outnumbers the free cores).
        route_library_output()
        fit_torch_threads()
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            if getattr(exc, "fails_without_retry", False):
                raise
            failing = _failing_without_retry(type(exc))  # type: ignore[arg-type]  # a class object is hashable
            again = failing.__new__(failing)
            again.__dict__.update(exc.__dict__)
            again.args = exc.args
            raise again.with_traceback(exc.__traceback__) from exc

    return task  # type: ignore[return-value]  # the wrapper has the task's signature


def end_as_skipped(result: Mapping[str, Any], why: str) -> None:
    """End the running task as *skipped*, ``why`` its last log line: what the grid shows apart from a
    success (a rejected candidate, an interval with no traffic). The result stays the task's XCom.
    Outside a task run (a direct call) there is nothing to mark: it returns."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowSkipException

    try:
        context = get_current_context()
    except Exception:  # noqa: BLE001 - no task is running: a library call, a test
        return
    log.warning("%s", why)
    context["ti"].xcom_push("return_value", dict(result))
    raise AirflowSkipException(why)

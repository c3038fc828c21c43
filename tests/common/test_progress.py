"""One decision for progress bars: only for a person at a terminal."""

from __future__ import annotations

import io

import pytest

from rlops.common.progress import AIRFLOW_ENV, show_progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AIRFLOW_ENV, raising=False)
    assert show_progress(stream=_Tty())


def test_no_bar_under_json_in_a_pipe_or_in_airflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AIRFLOW_ENV, raising=False)
    assert not show_progress(as_json=True, stream=_Tty())
    assert not show_progress(stream=io.StringIO())
    monkeypatch.setenv(AIRFLOW_ENV, "retrain_full")
    assert not show_progress(stream=_Tty())

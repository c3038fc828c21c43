"""Behaviour tests train small networks: one torch thread is as fast for these tensors and does
not stall when other processes hold the cores (an OpenMP team waits for its slowest thread)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

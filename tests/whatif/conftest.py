"""Fixtures of the what-if tests: the credit pack loaded once, and copies of it to write into."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT
from rlops.sandbox.pack import Pack, load_pack

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(CREDIT, check_liveness=False)


@pytest.fixture
def credit_copy(tmp_path: Path) -> Path:
    """A copy of the credit pack a test may write reward versions into."""
    dst = tmp_path / "packs" / "credit_approval"
    shutil.copytree(CREDIT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst

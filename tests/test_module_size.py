"""No module of the package grows past the size a reader holds in mind: 450 lines (≈400 is the
aim). A module that needs more holds more than one concept: split it along them."""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 450
PACKAGE = Path(__file__).resolve().parents[1] / "rlops"


def test_no_module_is_over_450_lines() -> None:
    sizes = {path: len(path.read_text().splitlines()) for path in sorted(PACKAGE.rglob("*.py"))}
    over = [f"{path.relative_to(PACKAGE.parent)}: {n} lines" for path, n in sizes.items() if n > MAX_LINES]
    assert len(sizes) > 300  # the whole package was looked at
    assert not over, f"modules over {MAX_LINES} lines (split each along its concepts): {over}"

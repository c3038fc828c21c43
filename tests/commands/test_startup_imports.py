"""What the quick commands leave unimported: ``rlops env validate`` runs the pack in a child
process, so its own process never needs torch; ``rlops config validate`` reads params, so it needs
neither Airflow's SDK, numpy nor torch, and no block reads its source for attribute docstrings."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from rlops.common.config import REPO_ROOT


def _modules_after(argv: list[str], heavy: tuple[str, ...]) -> list[str]:
    script = textwrap.dedent(f"""
        import sys
        from rlops.cli import main
        rc = main({argv!r})
        assert rc == 0, rc
        print("imported:" + ",".join(m for m in {heavy!r} if m in sys.modules))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("imported:"))
    return [m for m in line.removeprefix("imported:").split(",") if m]


def test_env_validate_leaves_torch_to_its_child() -> None:
    assert _modules_after(["env", "validate", "--scenario", "scenarios/credit_approval"], ("torch",)) == []


def test_config_validate_imports_no_airflow_numpy_or_torch() -> None:
    assert _modules_after(["config", "validate"], ("airflow", "numpy", "torch")) == []


def test_params_blocks_read_no_source_at_import() -> None:
    from rlops.common.params_base import Block

    assert not Block.model_config.get("use_attribute_docstrings", False)


def test_the_command_line_is_parsed_without_the_params_model() -> None:
    """Every command's flags come from the steps' requests, which name params blocks only as types:
    building the parser (what `rlops --help` and every command do first) imports no pydantic."""
    script = "import sys; from rlops.cli import build_parser; build_parser(); print('pydantic' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"

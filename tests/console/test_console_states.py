"""What a person reads on each surface for a passing, a failing and a skipped gate: the console's
pages, the CLI's gate table and the MLflow version description, after real evaluations and
promotions on the credit pack (hand-made policies, small budgets).

The registry this module builds:

* v1 — a deliberately bad policy, made champion by rlops;
* v2 — about as good as the rule engine: first requested from the MLflow UI under an impossible
  gate (rejected), then promoted by ``rlops model promote`` — its evaluation passes, with every
  segment gate ``skipped`` (the segments are smaller than ``min_segment_episodes``);
* v3 — the bad policy again: its evaluation against v2 fails on ``mean_return``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlops.registry import tags as T
from rlops.registry.aliases import move_champion
from tests.policy_kit import (
    NAME,
    SCENARIO,
    approve_all_policy,
    cloned_rules_policy,
    credit_pack,
    promotion_ctx,
    register,
)

S = SCENARIO
# 400 episodes: every credit segment holds fewer than 100 000 → each segment gate is skipped.
# The latency ratio is measured on a shared machine: loose here, it has its own tests.
BUDGET = {"episodes": 400, "min_segment_episodes": 100_000, "latency_p99_ratio": 1000.0}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, _mlflow_template_db: Path) -> Iterator[dict[str, Any]]:
    import torch

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.flow import promote, promote_from_alias

    tmp = tmp_path_factory.mktemp("console-states")
    (tmp / "mlflow").mkdir()
    shutil.copyfile(_mlflow_template_db, tmp / "mlflow" / "mlflow.db")
    pack = credit_pack()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow' / 'mlflow.db'}")
        mp.setenv("RLOPS_ARTIFACT_ROOT", str(tmp / "mlflow" / "artifacts"))
        mp.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp / 'storage'}")
        mp.setenv("RLOPS_HOME", str(tmp))
        mp.delenv("RLOPS_PARAMS", raising=False)
        mp.setattr(StepContext, "pack_with", lambda self, calibration: pack)
        torch.set_num_threads(1)
        ctx = promotion_ctx("20261201T0900", **BUDGET)
        bad = approve_all_policy(pack)
        v1 = register(ctx, pack, bad)
        move_champion(ctx.tracker, NAME, v1)
        v2 = register(ctx, pack, cloned_rules_policy(pack))
        impossible = promotion_ctx("20261201T0900", min_improvement=1000.0, **BUDGET)
        ui = promote_from_alias(impossible, v2)
        assert ui.outcome == "rejected", ui
        cli = promote(promotion_ctx("20261201T1000", **BUDGET), v2)
        assert cli.promoted, (cli.reason, cli.failed_gates)
        v3 = register(ctx, pack, bad)
        failed = promote(promotion_ctx("20261201T1100", **BUDGET), v3)
        assert not failed.promoted and "mean_return" in (failed.failed_gates or []), failed
        from fastapi.testclient import TestClient

        from rlops.console.app import create_app
        from rlops.console.data import ProjectData

        yield {
            "ctx": ctx,
            "v1": v1,
            "v2": v2,
            "v3": v3,
            "passed": cli,
            "failed": failed,
            "client": TestClient(create_app(ProjectData(registry_ttl_s=0.0))),
        }


def _text(html: str) -> str:
    """The page as a person reads it: tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def test_the_passing_evaluation_page_names_both_versions_and_says_passed(registry: dict[str, Any]) -> None:
    r = registry["client"].get(f"/s/{S}/evaluation/{registry['passed'].eval_run_id}")
    assert r.status_code == 200
    text = _text(r.text)
    assert f"Gate table: v{registry['v2']} vs champion v{registry['v1']}" in text
    assert "vNone" not in text and "None" not in text
    assert re.search(r'id="verdict" class="pass">passed', r.text)
    assert "failed" not in text.split("Gate table", 1)[1].split("gate candidate", 1)[0]


def test_the_failing_evaluation_page_names_the_failing_gate(registry: dict[str, Any]) -> None:
    r = registry["client"].get(f"/s/{S}/evaluation/{registry['failed'].eval_run_id}")
    text = _text(r.text)
    assert f"Gate table: v{registry['v3']} vs champion v{registry['v2']}" in text
    assert re.search(r'id="verdict" class="fail">failed: [^<]*mean_return', r.text)
    assert 'data-gate="mean_return" data-state="fail"' in r.text


def test_a_skipped_gate_reads_skipped_everywhere(registry: dict[str, Any]) -> None:
    from rlops.commands.model import _gate_lines
    from rlops.pipeline_steps.promotion.gates import gate_state

    gates = registry["passed"].gates
    segments = [g for g in gates if g["gate"].startswith("segment:")]
    assert segments and all(gate_state(g) == "skipped" for g in segments)
    name = segments[0]["gate"]
    # the console: the gate table and the promotion page
    page = registry["client"].get(f"/s/{S}/evaluation/{registry['passed'].eval_run_id}").text
    assert f'data-gate="{name}" data-state="skipped"' in page
    row = re.search(rf'data-gate="{re.escape(name)}" data-state="skipped">(.*?)</tr>', page, re.DOTALL).group(1)
    assert ">skipped<" in row and ">pass<" not in row
    promo = registry["client"].get(f"/s/{S}/promotion").text
    seg_row = re.search(rf'<tr data-gate="{re.escape(name)}">(.*?)</tr>', promo, re.DOTALL).group(1)
    assert "skipped" in seg_row and ">pass<" not in seg_row
    # the CLI's gate table
    line = next(ln for ln in _gate_lines({"gates": gates}) if name in ln)
    assert line.rstrip().endswith("skipped")
    # the MLflow version description
    desc = registry["ctx"].tracker.version_description(NAME, registry["v2"])
    assert desc.count("Gates (") == 1, desc  # each evaluation replaces the summary of the one before
    seg_line = next(ln for ln in desc.splitlines() if ln.startswith(f"- {name}:"))
    assert seg_line.startswith(f"- {name}: skipped (") and "episodes" in seg_line
    assert (
        "pass (n >=" not in desc
        and "skipped:"
        in desc.splitlines()[desc.splitlines().index(next(ln for ln in desc.splitlines() if ln.startswith("Gates (")))]
    )


def test_gate_states_are_exactly_pass_fail_skipped(registry: dict[str, Any]) -> None:
    states = {g["status"] for g in registry["passed"].gates + registry["failed"].gates}
    assert states <= {"pass", "fail", "skipped"} and {"pass", "fail", "skipped"} <= states


def test_the_new_champion_carries_no_stale_rejection(registry: dict[str, Any]) -> None:
    tracker, v2 = registry["ctx"].tracker, registry["v2"]
    assert tracker.get_alias(NAME, "champion") == v2
    tags = tracker.model_version_tags(NAME, v2)
    assert tags[T.PROMOTION_OUTCOME] == "champion", tags
    assert tags[T.PROMOTION_REQUESTED_BY] == T.REQUESTED_BY_RLOPS  # the UI request no longer speaks for it
    promo = registry["client"].get(f"/s/{S}/promotion").text
    row = re.search(r'<tr class="champion">(.*?)</tr>', promo, re.DOTALL).group(1)
    assert f">v{v2}<" in row and 'class="outcome"' in row and "rejected" not in row


def test_the_promotion_page_tells_each_evaluation(registry: dict[str, Any]) -> None:
    text = _text(registry["client"].get(f"/s/{S}/promotion").text)
    assert f"v{registry['v2']} vs champion v{registry['v1']}: passed" in text
    assert f"v{registry['v3']} vs champion v{registry['v2']}: failed: mean_return" in text
    assert f"v{registry['v2']} promoted to champion" in text


def test_numbers_are_rounded(registry: dict[str, Any]) -> None:
    page = registry["client"].get(f"/s/{S}/evaluation/{registry['passed'].eval_run_id}").text
    assert not re.findall(r"\d+\.\d{6,}", _text(page)), "a raw float on the gate table"
    assert re.search(r"\d ms<", page)  # handling time carries its unit


def test_experiments_open_on_the_training_view(registry: dict[str, Any]) -> None:
    client = registry["ctx"].tracker.client
    exp = client.get_experiment_by_name(S)
    assert exp.tags.get("mlflow.experimentKind") == "custom_model_development"

"""The typed params: one model, validated on project + pack params, errors with file, line and suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT, load_params, resolve_params
from rlops.common.params_model import Params
from rlops.common.params_sources import ParamsError
from rlops.common.ppo_config import PPOConfig

PROJECT = (REPO_ROOT / "params.yaml").read_text()


def _project(tmp_path: Path, text: str = PROJECT) -> Path:
    f = tmp_path / "params.yaml"
    f.write_text(text)
    return f


def _pack(tmp_path: Path, name: str, params_text: str) -> Path:
    """A pack folder with only a params.yaml (enough for the params; the packs' own checks are elsewhere)."""
    pack = tmp_path / "packs" / name
    pack.mkdir(parents=True)
    (pack / "params.yaml").write_text(params_text)
    return pack


def _replace(old: str, new: str) -> str:
    assert old in PROJECT, old
    return PROJECT.replace(old, new, 1)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _problem(exc: pytest.ExceptionInfo[ParamsError], key: str) -> object:
    found = [p for p in exc.value.problems if p.key == key]
    assert found, [str(p) for p in exc.value.problems]
    return found[0]


def test_the_project_and_every_pack_validate() -> None:
    for pack in sorted(p.name for p in (REPO_ROOT / "scenarios").iterdir() if (p / "scenario.yaml").exists()):
        resolved = resolve_params(pack, path=REPO_ROOT / "params.yaml")
        assert resolved.model.scenario == "credit_approval"


@pytest.mark.parametrize(
    "old,new,key,suggestion",
    [
        ("evaluate:\n  episodes:", "evalute:\n  episodes:", "evalute", "evaluate"),  # a top-level block
        (
            "  episodes: 2000           # simulated",
            "  episdes: 2000           # simulated",
            "capture.episdes",
            "episodes",
        ),
        ("    mode: embedded", "    mdoe: embedded", "promotion.webhook.mdoe", "mode"),  # a nested block
        ("  clip_coef: 0.2 ", "  clip_coeff: 0.2 ", "ppo.clip_coeff", "clip_coef"),  # generated from PPOConfig
        ("  bc_epochs: 10", "  bc_epoch: 10", "train.bc_epoch", "bc_epochs"),
    ],
)
def test_an_unknown_key_names_file_line_and_closest_name(
    tmp_path: Path, old: str, new: str, key: str, suggestion: str
) -> None:
    text = _replace(old, new)
    f = _project(tmp_path, text)
    with pytest.raises(ParamsError) as exc:
        load_params(f)
    p = _problem(exc, key)
    assert (p.file, p.line, p.suggestion) == (str(f), _line_of(text, new.strip().split("\n")[0]), suggestion)
    assert f"{f}:{p.line}: {key}: unknown key; did you mean '{suggestion}'?" in str(exc.value)


def test_a_key_with_no_close_name_lists_the_valid_ones(tmp_path: Path) -> None:
    text = _replace("  chunk_rows: 100000 ", "  windw: 100000 ")
    f = _project(tmp_path, text)
    with pytest.raises(ParamsError) as exc:
        load_params(f)
    p = _problem(exc, "capture.windw")
    assert p.line == _line_of(text, "windw:") and p.suggestion is None  # type: ignore[attr-defined]
    assert "valid: landing_dir, trace_dir" in str(exc.value)


@pytest.mark.parametrize(
    "old,new,key,expected",
    [
        ("  threshold: 0.01 ", "  threshold: often ", "drift.threshold", "valid number"),
        ("  edge_states: 2048 ", "  edge_states: 500 ", "stress.edge_states", "greater than or equal to 1000"),
        ("  selection: auto ", "  selection: everything ", "label_queue.selection", "'auto', 'entropy' or"),
        ("  rollout_stages: [0.05, 0.15, 1.0]", "  rollout_stages: [0.5, 0.15]", "evaluate.rollout_stages", "rise"),
    ],
)
def test_a_wrong_value_names_file_line_and_what_was_expected(
    tmp_path: Path, old: str, new: str, key: str, expected: str
) -> None:
    text = _replace(old, new)
    f = _project(tmp_path, text)
    with pytest.raises(ParamsError) as exc:
        load_params(f)
    p = _problem(exc, key)
    assert p.line == _line_of(text, new.strip().split(":")[0] + ":")  # type: ignore[attr-defined]
    assert expected in str(exc.value) and str(f) in str(exc.value)


def test_a_pack_typo_names_the_pack_file(tmp_path: Path) -> None:
    pack = _pack(tmp_path, "mine", 'evaluate:\n  segments:\n    young: "age < 25"\n  segment_tolerence: 0.1\n')
    doc = yaml.safe_load(PROJECT)
    doc["scenarios_dir"] = str(pack.parent)
    with pytest.raises(ParamsError) as exc:
        resolve_params("mine", params=doc, path=REPO_ROOT / "params.yaml")
    p = _problem(exc, "evaluate.segment_tolerence")
    assert (p.file, p.line, p.suggestion) == (str(pack / "params.yaml"), 4, "segment_tolerance")  # type: ignore


def test_a_pack_params_link_out_of_the_pack_is_refused_by_the_resolved_params_as_by_the_sandbox(
    tmp_path: Path,
) -> None:
    """One reader of a pack's params.yaml (``rlops.sandbox.precheck.load_params``): the resolved
    params refuse what the pack loader refuses — here a link to a file outside the pack, which the
    project-file reader would have followed."""
    from rlops.common.params_sources import ConfigError
    from rlops.sandbox.errors import PackError
    from rlops.sandbox.precheck import load_params as load_pack_params

    pack = _pack(tmp_path, "mine", "")
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("train:\n  total_timesteps: 1000\n")
    (pack / "params.yaml").unlink()
    (pack / "params.yaml").symlink_to(outside)
    doc = yaml.safe_load(PROJECT)
    doc["scenarios_dir"] = str(pack.parent)
    with pytest.raises(PackError) as by_pack:
        load_pack_params(pack)
    with pytest.raises(ConfigError) as by_params:
        resolve_params("mine", params=doc, path=REPO_ROOT / "params.yaml")
    assert str(by_params.value) == f"pack mine params.yaml: {by_pack.value}"


def test_pack_params_deep_merge_and_every_origin_is_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = _pack(
        tmp_path, "mine", "stress:\n  perturbations:\n    old: {segment: elderly}\nevaluate:\n  completion_min: 0.7\n"
    )
    doc = yaml.safe_load(PROJECT)
    doc["scenarios_dir"] = str(pack.parent)
    doc["storage"]["root"] = "s3://bucket/rlops"
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", "s3://bucket/rlops")
    resolved = resolve_params("mine", params=doc, path=REPO_ROOT / "params.yaml")
    cfg = resolved.model
    # deep merge: the pack adds a perturbation to the project's and keeps the project's other evaluate keys
    assert set(cfg.stress.perturbations) == {"latency_x3", "errors_x5", "old"}
    assert cfg.evaluate.completion_min == 0.7 and cfg.evaluate.episodes == 4000
    origins = {key: origin for key, _, origin in resolved.rows()}
    assert origins["evaluate.completion_min"] == f"{pack / 'params.yaml'}:5"
    assert origins["evaluate.episodes"] == f"{REPO_ROOT / 'params.yaml'}:{_line_of(PROJECT, '  episodes: 4000')}"
    assert origins["storage.root"] == "env RLOPS_STORAGE_ROOT"
    assert origins["ppo.obs_clip"] == "default" and origins["local_dir"] == "default"


def test_defaults_live_in_one_place() -> None:
    """The ppo block's defaults and descriptions are PPOConfig's; the ones the pack derives default to null."""
    ppo = Params().ppo
    assert ppo.obs_clip == PPOConfig.obs_clip and ppo.plateau_patience == PPOConfig.plateau_patience
    assert ppo.num_steps is None and ppo.gamma is None and ppo.num_minibatches is None
    assert "Bound on a standardised feature" in (type(ppo).model_fields["obs_clip"].description or "")
    assert Params().train.learning_rate is None  # a train override of ppo: null means "the ppo value"


def test_params_yaml_writes_down_the_model_defaults() -> None:
    """params.yaml documents every block with the model's own defaults (only the project's choice of
    reward function differs: the model's default is the pack's newest)."""
    from rlops.common.params_sources import _leaves

    defaults = dict(_leaves(Params().model_dump(mode="json"), ()))
    written = dict(_leaves(Params.model_validate(yaml.safe_load(PROJECT)).model_dump(mode="json"), ()))
    differ = {".".join(k) for k in defaults.keys() | written.keys() if defaults.get(k) != written.get(k)}
    assert differ == {"reward_fn"}
    blocks = set(yaml.safe_load(PROJECT))
    assert blocks == set(Params.model_fields) - {"scenarios_dir", "local_dir"}  # every block is written down

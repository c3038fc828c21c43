"""Scenario packs: a folder with ``scenario.yaml``, ``rules.yaml``, ``reward_v*.py`` and an
optional ``params.yaml``. :func:`load_pack` validates all of it or raises one :class:`PackError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sandbox.compile import CompiledScenario
from sandbox.env import BatchedEnv, NoLegalActionError
from sandbox.errors import PackError
from sandbox.reward import RewardFunction, load_reward_fn
from sandbox.spec import parse_scenario
from sandbox.yaml_lines import load_yaml

_REWARD_FILE = re.compile(r"^reward_(v\w+)\.py$")


@dataclass
class Pack:
    """A loaded, validated scenario pack."""

    path: Path
    scenario: CompiledScenario
    rules: dict[str, Any]
    reward_fns: dict[str, RewardFunction]
    params: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.scenario.spec.name

    def reward_fn(self, version: str | None = None) -> RewardFunction:
        """The reward function by label (``v1``) — the newest when ``version`` is None."""
        if version is None:
            version = sorted(self.reward_fns, key=_version_key)[-1]
        if version not in self.reward_fns:
            raise KeyError(f"pack {self.name} has no reward function '{version}' "
                           f"(available: {sorted(self.reward_fns, key=_version_key)})")
        return self.reward_fns[version]

    def make_env(self, num_envs: int = 1, reward_version: str | None = None, profile: str | None = None,
                 device: str | torch.device = "cpu", seed: int = 0, **kwargs: Any) -> BatchedEnv:
        env = BatchedEnv(self.scenario, self.reward_fn(reward_version), num_envs=num_envs, profile=profile,
                         device=device, **kwargs)
        env.reset(seed)
        return env


def _version_key(label: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", label)
    return (int(digits) if digits else -1, label)


def load_pack(path: str | Path, calibration: dict[str, Any] | None = None, check_liveness: bool = True) -> Pack:
    """Load and validate a pack folder. ``calibration`` (see :mod:`pipeline_steps.drift.calibrate`)
    replaces field initial distributions and simulation profiles before compiling."""
    root = Path(path)
    if not root.is_dir():
        raise PackError(str(root), None, "", "scenario pack folder not found")
    scen_file = root / "scenario.yaml"
    if not scen_file.exists():
        raise PackError(str(scen_file), None, "", "missing scenario.yaml in the pack")
    doc = load_yaml(scen_file)
    if calibration:
        doc = apply_calibration(doc, calibration)
    spec = parse_scenario(doc, str(scen_file))
    scenario = CompiledScenario(spec)
    rules = _load_rules(root / "rules.yaml")
    reward_files = sorted(p for p in root.iterdir() if _REWARD_FILE.match(p.name))
    if not reward_files:
        raise PackError(str(root), None, "", "no reward function: expected reward_v<N>.py files in the pack")
    reward_fns = {}
    for p in reward_files:
        label = _REWARD_FILE.match(p.name).group(1)  # type: ignore[union-attr]
        reward_fns[label] = load_reward_fn(p, rules, scenario.action_names)
    params: dict[str, Any] = {}
    if (root / "params.yaml").exists():
        params = load_yaml(root / "params.yaml") or {}
        if not isinstance(params, dict):
            raise PackError(str(root / "params.yaml"), None, "", "expected a mapping of parameter overrides")
    pack = Pack(root, scenario, rules, reward_fns, dict(params), calibration)
    if check_liveness:
        check_no_dead_ends(pack)
    return pack


def _load_rules(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise PackError(str(path), None, "", "missing rules.yaml (the rule registry reward components cite)")
    doc = load_yaml(path)
    rules = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(rules, dict) or not rules:
        raise PackError(str(path), getattr(doc, "line", None), "rules",
                        "expected a mapping 'rules:' of rule id → {title, text}")
    for rid, body in rules.items():
        if not isinstance(body, dict) or "title" not in body:
            raise PackError(str(path), rules.line_of(rid), f"rules.{rid}", "each rule needs at least a 'title'")
    return dict(rules)


def apply_calibration(doc: dict[str, Any], calibration: dict[str, Any]) -> dict[str, Any]:
    """Overlay a calibration (``fields: {path: init}``, ``simulation: {profiles: …}``) on a scenario.

    Only the ``calibrated`` profile is created or replaced: the fitted field distributions become
    a population shift of probability 1 of that profile, so every other profile (above all the
    production stand-in ``live``) keeps its declared initial distributions and shifts, and
    applying the same calibration twice gives the same scenario."""
    import copy

    from sandbox.profiles import CALIBRATED
    out = copy.deepcopy(doc)
    sim = out.setdefault("simulation", {})
    profiles = sim.setdefault("profiles", {})
    for name, prof in ((calibration.get("simulation") or {}).get("profiles") or {}).items():
        if name != CALIBRATED:
            raise PackError("calibration", None, f"simulation.profiles.{name}",
                            f"a calibration writes only the '{CALIBRATED}' profile")
        profiles[name] = copy.deepcopy(prof)
    fields = dict(calibration.get("fields") or {})
    if fields:
        if CALIBRATED not in profiles:
            base = profiles[out.get("default_profile") or ("sandbox" if "sandbox" in profiles else next(iter(profiles)))]
            profiles[CALIBRATED] = {k: copy.deepcopy(v) for k, v in base.items() if k != "population"}
        profiles[CALIBRATED]["population"] = [{"name": "fitted", "probability": 1.0, "init": fields}]
    return out


def check_no_dead_ends(pack: Pack, episodes: int = 512, seed: int = 0) -> None:
    """Roll random legal actions through every profile and fail on a state with no legal action."""
    for profile in pack.scenario.profiles:
        env = pack.make_env(episodes, profile=profile, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(pack.scenario.spec.horizon * 2):
            masks = env.action_masks()
            if not bool(masks.any(dim=1).all()):
                i = int((~masks.any(dim=1)).nonzero()[0, 0])
                raise PackError(pack.scenario.file, None, "actions",
                                f"the action set can leave a state with no legal action (profile {profile}, "
                                f"reset state of episode {i}); give every state at least one legal action")
            actions = torch.multinomial(masks.float(), 1, generator=gen).squeeze(1)
            try:
                env.step(actions)
            except NoLegalActionError as exc:
                raise PackError(pack.scenario.file, None, "actions",
                                f"the action set can leave a state with no legal action: {exc}") from None

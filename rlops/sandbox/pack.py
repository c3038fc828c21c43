"""Scenario packs: a folder with ``scenario.yaml``, ``rules.yaml``, ``reward_v*.py`` and an
optional ``params.yaml``. :func:`load_pack` validates all of it or raises one :class:`PackError`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.constraints import parse_constraints
from rlops.sandbox.env import BatchedEnv, NoLegalActionError
from rlops.sandbox.errors import PackError
from rlops.sandbox.kpis import compile_kpis
from rlops.sandbox.outcome_params import OutcomeFieldError, apply_outcome_factors
from rlops.sandbox.precheck import REWARD_FILE, load_params, load_rules, reward_files, scenario_file
from rlops.sandbox.probe import probe_reward_fn
from rlops.sandbox.profiles import CALIBRATED
from rlops.sandbox.reward import RewardFunction
from rlops.sandbox.reward_loading import load_reward_fn
from rlops.sandbox.reward_runtime import RewardError
from rlops.sandbox.reward_signals import SignalWeight
from rlops.sandbox.spec import parse_scenario
from rlops.sandbox.yaml_lines import load_yaml

#: ``on_stage(file, what)`` is told what :func:`load_pack` starts on, so a supervisor that has
#: to stop a load (:mod:`rlops.sandbox.isolate`) can say which file it was busy with.
StageCallback = Callable[[Path, str], None]

#: Steps per profile of the liveness check: twice the horizon, at most this many.
MAX_LIVENESS_STEPS = 64


@dataclass
class Pack:
    """A loaded, validated scenario pack."""

    path: Path
    scenario: CompiledScenario
    rules: dict[str, Any]
    reward_fns: dict[str, RewardFunction]
    params: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None
    signals: dict[str, float] = field(default_factory=dict)
    """Business signal values in force (:mod:`rlops.sandbox.reward_signals`), bound to every reward
    function :meth:`reward_fn` returns; a declared signal without a value is at its baseline."""

    @property
    def name(self) -> str:
        return self.scenario.spec.name

    @property
    def signal_weights(self) -> list[SignalWeight]:
        """Every ``SIGNAL_WEIGHTS`` declaration of the pack's reward functions, by label order."""
        labels = sorted(self.reward_fns, key=_version_key)
        return [sw for label in labels for sw in self.reward_fns[label].signal_weights]

    def reward_fn(self, version: str | None = None) -> RewardFunction:
        """The reward function by label (``v1``) — the newest when ``version`` is None."""
        if version is None:
            version = sorted(self.reward_fns, key=_version_key)[-1]
        if version not in self.reward_fns:
            raise KeyError(
                f"pack {self.name} has no reward function '{version}' "
                f"(available: {sorted(self.reward_fns, key=_version_key)})"
            )
        fn = self.reward_fns[version].with_signals(self.signals)
        scales = outcome_scales(self.calibration, fn)
        return replace(fn, outcome_scales=scales) if scales else fn

    def make_env(
        self,
        num_envs: int = 1,
        reward_fn: str | None = None,
        profile: str | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
        **kwargs: Any,
    ) -> BatchedEnv:
        env = BatchedEnv(
            self.scenario, self.reward_fn(reward_fn), num_envs=num_envs, profile=profile, device=device, **kwargs
        )
        env.reset(seed)
        return env


def _version_key(label: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", label)
    return (int(digits) if digits else -1, label)


def load_pack(
    path: str | Path,
    calibration: dict[str, Any] | None = None,
    check_liveness: bool = True,
    on_stage: StageCallback | None = None,
    probe_rewards: bool = False,
    signals: dict[str, float] | None = None,
) -> Pack:
    """Load and validate a pack folder. ``calibration`` (see :mod:`rlops.pipeline_steps.drift.calibrate`)
    replaces field initial distributions and simulation profiles before compiling.

    Every file must lie inside the folder (:mod:`rlops.sandbox.pack_files`). With ``probe_rewards``
    each reward function is run on edge states (:mod:`rlops.sandbox.probe`) and must score them with
    finite numbers; validation does this, while the stress test and the evaluation gates load
    broken reward functions on purpose, to report them. Reward modules are imported in this process:
    to bound untrusted pack code in time and memory, validate with
    :func:`rlops.sandbox.isolate.validate_isolated` first. ``signals`` are the business signal
    values in force (:attr:`Pack.signals`)."""
    stage = on_stage or (lambda _file, _what: None)
    root = Path(path)
    scen_file = scenario_file(root)
    stage(scen_file, "reading the scenario")
    doc = load_yaml(scen_file, root)
    if calibration:
        doc = apply_calibration(doc, calibration)
    try:
        spec = parse_scenario(doc, str(scen_file))
        scenario = CompiledScenario(spec)
    except RecursionError:
        raise PackError(str(scen_file), None, "", "the scenario is nested too deeply") from None
    rules = load_rules(root / "rules.yaml", root)
    parse_constraints(rules, scenario, str(root / "rules.yaml"))  # a bad rule constraint fails the load
    compile_kpis(scenario, rules)  # a bad KPI fails the load
    reward_fns = _load_reward_fns(root, rules, scenario, stage, probe_rewards)
    for fn in reward_fns.values():  # a malformed rewards: block fails the load, not a later training
        outcome_scales(calibration, fn)
    pack = Pack(root, scenario, rules, reward_fns, load_params(root), calibration, dict(signals or {}))
    if check_liveness:
        stage(scen_file, "rolling random episodes (liveness check)")
        live_key = _liveness_key(doc, rules, pack.params, reward_fns)
        if not _passed_liveness(live_key):  # the verdict is a function of what the key digests
            check_no_dead_ends(pack)
            _remember_liveness(live_key)
    return pack


#: Digests of (effective scenario document, rules, pack params, reward sources, sandbox code) that
#: passed the liveness check: the check rolls seeded random episodes, so the same inputs always give
#: the same verdict, and a scheduler loading the same pack every few minutes need not roll them
#: again. Kept in this process and, across the processes of a deployment (each task is one), as
#: empty files under ``$RLOPS_CACHE_DIR/liveness`` (default ``$XDG_CACHE_HOME/rlops``, else
#: ``~/.cache/rlops``).
_LIVE_PACKS: dict[str, None] = {}


def liveness_cache_dir() -> Path:
    root = (
        os.environ.get("RLOPS_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlops"
    )
    return Path(root) / "liveness"


def _passed_liveness(key: str) -> bool:
    if key in _LIVE_PACKS:
        return True
    try:
        found = (liveness_cache_dir() / key).is_file()
    except OSError:
        found = False
    if found:
        _LIVE_PACKS[key] = None
    return found


def _remember_liveness(key: str) -> None:
    _LIVE_PACKS[key] = None
    while len(_LIVE_PACKS) > 256:
        _LIVE_PACKS.pop(next(iter(_LIVE_PACKS)))
    try:  # a cache that cannot be written only costs the next process the check again
        folder = liveness_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / key).touch()
    except OSError:
        pass


@functools.cache
def _sandbox_code_digest() -> str:
    """The sandbox's own source: a verdict recorded by other code does not carry over."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def _liveness_key(
    doc: dict[str, Any], rules: dict[str, Any], params: dict[str, Any], reward_fns: dict[str, RewardFunction]
) -> str:
    text = json.dumps([doc, rules, params], sort_keys=True, default=str) + "".join(
        f"{k}:{fn.version}" for k, fn in sorted(reward_fns.items())
    )
    return hashlib.sha256((_sandbox_code_digest() + text).encode()).hexdigest()


def _load_reward_fns(
    root: Path, rules: dict[str, Any], scenario: CompiledScenario, stage: StageCallback, probe: bool
) -> dict[str, RewardFunction]:
    reward_fns = {}
    for p in reward_files(root):
        label = REWARD_FILE.match(p.name).group(1)  # type: ignore[union-attr]  # reward_files() lists only names REWARD_FILE matches
        stage(p, "importing the reward module")
        reward_fns[label] = load_reward_fn(p, rules, scenario.action_names, root, scenario.role_names)
        if probe:
            stage(p, "probing the reward function on edge states")
            probe_reward_fn(scenario, reward_fns[label])
    return reward_fns


def outcome_scales(calibration: dict[str, Any] | None, fn: RewardFunction) -> tuple[tuple[str, float, float], ...]:
    """The ``rewards:`` block of a calibration — ``{component: {negative|positive: {factor, …}}}``,
    how live traffic scores a component's outcomes against the pack's function — as
    :attr:`RewardFunction.outcome_scales` for the components ``fn`` has."""
    block = (calibration or {}).get("rewards") or {}
    if not isinstance(block, dict):
        raise PackError("calibration", None, "rewards", "expected a mapping {component: {negative|positive: {factor}}}")
    names = {c.name for c in fn.components}
    out = []
    for name, signs in sorted(block.items()):
        if not isinstance(signs, dict) or set(signs) - {"negative", "positive"}:
            raise PackError(
                "calibration", None, f"rewards.{name}", "expected a mapping with the keys 'negative' and/or 'positive'"
            )
        factor = {k: _scale_factor(signs.get(k), f"rewards.{name}.{k}") for k in ("negative", "positive")}
        if name in names:  # a component of another reward function of the pack
            out.append((name, factor["negative"], factor["positive"]))
    return tuple(out)


def _scale_factor(entry: Any, path: str) -> float:
    if entry is None:
        return 1.0
    value = entry.get("factor") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise PackError("calibration", None, path, f"factor {value!r}: expected a finite number > 0")
    return float(value)


def apply_calibration(doc: dict[str, Any], calibration: dict[str, Any]) -> dict[str, Any]:
    """Overlay a calibration (``fields: {path: init}``, optionally ``population: [{name,
    probability, init}]``, ``simulation: {profiles: …}``) on a scenario.

    Only the ``calibrated`` profile is created or replaced: the fitted population segments (or,
    without segments, the fitted field distributions as one shift of probability 1) become that
    profile's population, so every other profile (above all the production stand-in ``live``)
    keeps its declared initial distributions and shifts, and applying the same calibration twice
    gives the same scenario. ``outcomes: {path: [{factor, when}]}`` — factors of a fittable hidden
    probability fitted from live outcomes — rewrite that field's expressions in the calibrated
    scenario (the pack's files are never edited)."""
    import copy

    out = copy.deepcopy(doc)
    sim = out.setdefault("simulation", {})
    profiles = sim.setdefault("profiles", {})
    for name, prof in ((calibration.get("simulation") or {}).get("profiles") or {}).items():
        if name != CALIBRATED:
            raise PackError(
                "calibration",
                None,
                f"simulation.profiles.{name}",
                f"a calibration writes only the '{CALIBRATED}' profile",
            )
        profiles[name] = copy.deepcopy(prof)
    fields = dict(calibration.get("fields") or {})
    if fields:
        if CALIBRATED not in profiles:
            base = profiles[
                out.get("default_profile") or ("sandbox" if "sandbox" in profiles else next(iter(profiles)))
            ]
            profiles[CALIBRATED] = {k: copy.deepcopy(v) for k, v in base.items() if k != "population"}
        segments = calibration.get("population") or [{"name": "fitted", "probability": 1.0, "init": fields}]
        profiles[CALIBRATED]["population"] = copy.deepcopy(segments)
    if calibration.get("outcomes"):  # fitted factors of the hidden dynamics (rlops.sandbox.outcome_params)
        try:
            out = apply_outcome_factors(out, calibration["outcomes"])
        except OutcomeFieldError as exc:
            raise PackError("calibration", None, "outcomes", str(exc)) from None
    return out


def check_no_dead_ends(pack: Pack, episodes: int = 512, seed: int = 0) -> None:
    """Roll random legal actions through every profile (twice the horizon, at most
    :data:`MAX_LIVENESS_STEPS` steps) and fail on a state with no legal action, a state field that
    is not a finite number, a non-finite reward, or an action that is never legal."""
    scn = pack.scenario
    ever_legal = torch.zeros(scn.n_actions, dtype=torch.bool)
    for profile in scn.profiles:
        env = pack.make_env(episodes, profile=profile, seed=seed)
        _check_finite(pack, env.S, f"the initial state (profile {profile})")
        gen = torch.Generator().manual_seed(seed)
        for _ in range(min(scn.spec.horizon * 2, MAX_LIVENESS_STEPS)):
            masks = env.action_masks()
            ever_legal |= masks.any(dim=0)
            if not bool(masks.any(dim=1).all()):
                i = int((~masks.any(dim=1)).nonzero()[0, 0])
                raise PackError(
                    scn.file,
                    None,
                    "actions",
                    f"the action set can leave a state with no legal action (profile {profile}, "
                    f"reset state of episode {i}); every reachable state needs at least one legal action",
                )
            actions = torch.multinomial(masks.float(), 1, generator=gen).squeeze(1)
            try:
                env.step(actions)
            except NoLegalActionError as exc:
                raise PackError(
                    scn.file, None, "actions", f"the action set can leave a state with no legal action: {exc}"
                ) from None
            except RewardError as exc:
                raise PackError(pack.reward_fn().path, None, "", f"in a random episode: {exc}") from None
            _check_finite(pack, env.S, f"a step of a random episode (profile {profile})")
    never = [a for a, legal in zip(scn.spec.actions, ever_legal.tolist()) if not legal]
    if never:
        a = never[0]
        raise PackError(
            scn.file,
            a.line,
            f"actions.{a.name}",
            f"action '{a.name}' was never legal in {episodes} random episodes per profile: its "
            "precondition or required fields never hold (an action that can never be taken is a mistake)",
        )


def _check_finite(pack: Pack, S: torch.Tensor, when: str) -> None:
    """Every field of every row of ``S`` must be a finite number."""
    cols = (~torch.isfinite(S)).any(dim=0).nonzero().flatten()
    if not cols.numel():
        return
    path = next(p for p, j in pack.scenario.columns.items() if j == int(cols[0]))
    f = pack.scenario.fields.get(path)
    raise PackError(
        pack.scenario.file,
        None if f is None else f.line,
        path,
        f"field '{path}' is not a finite number after {when}: an initial distribution or an "
        "effect produces NaN or infinity",
    )

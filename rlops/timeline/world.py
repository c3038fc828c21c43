"""A simulated production timeline: the pack's DAGs on their schedules, over days of simulated
time, against a production world scripted by events.

Each 15-minute tick, the *production stand-in* (the pack's ``live`` profile with the events in
force, :mod:`rlops.timeline.events`) serves applicants with the policies the
``agent_sdk.PolicyClient`` holds — champion, challenger by its traffic share, the rule engine
before the first champion and for any illegal decision — and its traces go through the
``agent_sdk`` tracer into the landing zone, stamped with simulated time. Then the pack's DAGs
(``dags/``, ids ``<dag>__<pack>``) that are due at the tick's end run through ``dag.test()`` with
that logical date, as the scheduler would start them, and the runs they trigger after them
(:mod:`rlops.timeline.dag_driver`): schedules, Param defaults, trigger links,
staged roll-out, demotion of a regressed champion and the skipping of unchanged retrains are the
DAGs' own.
``label_queue`` is left out by default (no human labels to simulate: ``TimelineConfig.dags``).

Budgets (timesteps, evaluation episodes) are scaled down so that two days fit in minutes on two
cores (:func:`simulation_params`); the cadence is the DAGs'. A deliberately worse candidate
(``bad_candidate`` event) is a randomly initialised network offered to the ``promote__<pack>`` DAG.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from rlops.agent_sdk.tracer import Tracer
from rlops.common.config import deep_merge, load_params, scenarios_dir, set_path
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.registry import tags as T
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import rule_policy
from rlops.timeline.events import Event, production_doc, reward_module_path, reward_modules


@dataclass(frozen=True)
class TimelineConfig:
    """Budgets of one simulated timeline."""

    scenario: str = "credit_approval"
    hours: int = 48
    start: str = "20261201T0000"
    tick_minutes: int = 15
    episodes_per_tick: int = 250
    full_timesteps: int = 200_000
    """a seventh of the product's 1.5M: after the rule change, PPO from scratch in the calibrated
    sandbox reached 99–106 % of the oracle's live return at 200k steps, 26–68 % at 40k"""
    incremental_timesteps: int = 50_000
    reference_timesteps: int | None = None
    """budget of the regret's world-trained reference after a reward change (None: the product's
    default, as a real full retrain in that world would train)"""
    eval_episodes: int = 1000
    challenger_fraction: float | None = None  # None: the staged roll-out's share (model version tag)
    dags: tuple[str, ...] = ("trace_capture", "drift_monitor", "rollout", "retrain_full", "retrain_incremental")
    """the pack's DAGs the timeline runs on their schedules (label_queue needs human labels)"""
    ab_min_episodes: int = 40  # live A/B episodes per group a stage needs (traffic is scaled down too)
    client_refresh_s: float = 30.0  # the policy client's registry poll period, in simulated seconds
    client_refresh_phase_s: float = 7.0  # when its first poll falls after the start
    exploration: float | None = None
    """share of decisions the policy client explores (None: params ``exploration.share``), drawn
    from ``exploration.distribution``: the logged propensities then support off-policy evaluation
    of candidates (the ``ope:dr`` gate)"""
    late_outcome: str | None = None
    """a reward component of the pack the business learns late (the credit pack's ``loan_outcome``):
    left out of the traced rows and sent ``outcome_delay_hours`` after each episode's last decision
    through ``Tracer.outcome`` (:mod:`rlops.timeline.late_outcomes`); None: every component is
    scored at decision time"""
    outcome_delay_hours: float = 1.0
    """simulated hours from an episode's last decision to its late outcome (the days of a real loan,
    compressed as the cadence is); keep it well under ``ope.window_hours`` × ``ope.max_censored``'s
    reach, or every window still awaits too many outcomes for the off-policy gate to judge"""
    seed: int = 0
    params: tuple[tuple[str, Any], ...] = ()
    """settings of the simulated project over params.yaml's, as (dotted key, value) pairs, merged
    last: e.g. ``(("drift.anomaly_z", 4.0),)`` to see what a setting does to the loop"""


@dataclass
class Hour:
    """What happened in one simulated hour (the row of the report)."""

    hour: int
    live_return: float | None = None
    live_return_se: float | None = None
    episodes: int = 0
    fallbacks: int = 0
    challenger_episodes: int = 0
    p_values: dict[str, float] = field(default_factory=dict)
    drifted: list[str] = field(default_factory=list)
    alarm: bool = False
    events: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    champion: str | None = None
    oracle_return: float | None = None  # the references / rule engine on the same live episodes (regret.py)
    trained_return: float | None = None
    reference_return: float | None = None
    rules_return: float | None = None
    regret: float | None = None
    regret_share: float | None = None


def simulation_params(base: dict[str, Any], root: Path, cfg: TimelineConfig) -> dict[str, Any]:
    """params.yaml with the timeline's own storage, registry and scaled-down budgets."""
    overrides: dict[str, Any] = {}
    for dotted, value in cfg.params:
        set_path(overrides, tuple(dotted.split(".")), value)
    merged = deep_merge(
        base,
        {
            "scenario": cfg.scenario,
            "storage": {"root": f"file://{root / 'storage'}"},
            "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}", "artifact_root": str(root / "artifacts")},
            "local_dir": str(root / "local"),
            "label_queue": {"db_url": f"sqlite:///{root / 'queue.db'}"},
            "capture": {"simulate_when_empty": False},
            "drift": {"baseline_episodes": 4 * cfg.episodes_per_tick * 2, "workers": 1, "plots": "drifted"},
            "recalibrate": {"check_samples": 5000},
            "train": {
                "total_timesteps": cfg.full_timesteps,
                "incremental_timesteps": cfg.incremental_timesteps,
                "num_envs": 256,
                "eval_episodes": 300,
                "checkpoint_every": 1000,
            },
            "evaluate": {
                "episodes": cfg.eval_episodes,
                "bootstrap_samples": 500,
                "latency_samples": 100,
                "ab_window_hours": 2,
                "ab_min_episodes": cfg.ab_min_episodes,
            },
            "stress": {"edge_states": 1000, "gaming_episodes": 300, "policy_episodes": 300},
            "reward_model": {"pairs": 1000, "epochs": 30},  # relabels traces; the policy trains on the sandbox
        },
    )
    if cfg.late_outcome is not None:  # the outcome the agents send is the component the world withholds
        merged = deep_merge(merged, {"outcomes": {"rewards": {cfg.late_outcome: {"component": cfg.late_outcome}}}})
    return deep_merge(merged, overrides)


@contextmanager
def _environment(params_file: Path, root: Path, scenario: str) -> Iterator[None]:
    """Point every step and DAG (they read params through RLOPS_PARAMS, packs through
    RLOPS_SCENARIOS_DIR) at the timeline's own world: one pack, its own storage and registry."""
    packs = root / "scenarios"
    if not (packs / scenario).exists():
        shutil.copytree(scenarios_dir(load_params()) / scenario, packs / scenario)
    env = {
        "RLOPS_PARAMS": str(params_file),
        "RLOPS_STORAGE_ROOT": f"file://{root / 'storage'}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
        "RLOPS_ARTIFACT_ROOT": str(root / "artifacts"),
        "RLOPS_QUEUE_DB": f"sqlite:///{root / 'queue.db'}",
        "RLOPS_SCENARIOS_DIR": str(packs),
    }
    with mock.patch.dict(os.environ, env):
        yield


class ProductionWorld:
    """The production stand-in: a copy of the pack whose ``live`` profile carries the events in
    force. The pipeline never sees this copy; it sees only the traces it produces."""

    def __init__(self, pack_dir: Path, root: Path) -> None:
        import yaml

        self.pack_dir, self.root = pack_dir, root
        self.doc = yaml.safe_load((pack_dir / "scenario.yaml").read_text())
        self._cache: dict[tuple[int, ...], Any] = {}

    def pack(self, events: list[Event], all_events: list[Event]) -> Any:
        import yaml

        key = tuple(i for i, e in enumerate(all_events) if e in events and e.changes_world)
        if key not in self._cache:
            folder = self.root / "production" / ("world-" + "-".join(map(str, key)) if key else "world")
            if folder.exists():
                shutil.rmtree(folder)
            shutil.copytree(self.pack_dir, folder)
            for name, module in reward_modules([all_events[i] for i in key]).items():  # the business's new reward
                shutil.copyfile(reward_module_path(self.pack_dir, module, f"reward module {name}"), folder / name)
            doc = production_doc(self.doc, [all_events[i] for i in key])
            (folder / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            self._cache[key] = load_pack(folder, check_liveness=False)
        return self._cache[key]


class SimTracer:
    """An ``agent_sdk.Tracer`` whose files carry simulated time in their hour folder and name."""

    def __new__(cls, landing_uri: str) -> Any:

        class _Tracer(Tracer):
            clock = None

            def _name(self, scenario: str, under: str = "") -> tuple[str, str]:
                folder, name = super()._name(scenario, under)
                now = self.clock
                folder = folder.rsplit("/", 2)[0] + f"/date={now:%Y-%m-%d}/hour={now:%H}"
                return folder, f"{now:%Y%m%dT%H%M%S%f}Z" + name.split("Z", 1)[1]

        return _Tracer(landing_uri, flush_every=100_000, max_buffer=200_000, flush_interval_s=None, fsync=False)


def no_policy_fallback(env: Any) -> Any:
    """The client with no champion loaded: every decision is the rule engine's fallback."""
    import torch

    return rule_policy(env), {"fallback": torch.ones(env.num_envs, dtype=torch.bool)}


def bad_candidate(ctx: Any, seed: int) -> str:
    """Register a randomly initialised network: a deliberately worse candidate."""
    import torch

    from rlops.pipeline_steps.training.candidate import register_policy

    pack = ctx.load_pack()
    torch.manual_seed(seed)
    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout)).eval()
    with ctx.tracker.start_run("bad-candidate", tags={T.STEP: T.TIMELINE}) as run, tempfile.TemporaryDirectory() as tmp:
        return register_policy(
            ctx, run, pack, net, {"mode": "full", "run_key": ctx.run_key, "timeline": "bad_candidate"}, Path(tmp)
        )

"""Where a step's inputs are resolved: the params, the scenario pack, the calibration, the run key.

A command or an Airflow task builds a :class:`StepContext` for the run and resolves from it what its
step needs (the training step: :func:`rlops.pipeline_steps.training.setup.resolve_training`); the
step's body takes the resolved values and the narrow services it uses
(:class:`~rlops.pipeline_steps.infra.services.StepServices`, which this context satisfies) and
returns a typed result (:class:`~rlops.common.step_result.StepResult`), whose dict is what the CLI
prints with ``--json`` and what an Airflow task pushes to XCom. Storage layout under ``storage.root``::

    landing/scenario=<s>/date=<d>/hour=<h>/*.jsonl live agents' trace files (agent_sdk.Tracer)
    traces/scenario=<s>/date=<d>/hour=<h>/part-<run_key>.parquet
    quarantine/scenario=<s>/date=<d>/hour=<h>/part-<run_key>.parquet   rows that broke the contract
    calibrations/<scenario>/<version>.json         sandbox calibrations (+ latest.json)
    reports/<step>/<scenario>/<run_key>/...        drift, stress, evaluation, audit reports

A run key (:class:`~rlops.common.run_key.RunKey`) names the data interval a run works on
(``20261130T0500``), so re-running a step for the same interval overwrites its outputs instead of
adding to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.config import check_pack_identity, load_params, resolve_local, resolve_params, scenarios_dir
from rlops.common.params_model import Params
from rlops.common.run_key import RunKey
from rlops.common.scenario_name import check_scenario_name
from rlops.pipeline_steps.infra.signal_store import SignalStore, pack_declarations
from rlops.registry.client import Tracker
from rlops.sandbox.reward_choice import choose_reward
from rlops.storage.backend import Storage

if TYPE_CHECKING:
    from rlops.common.params_base import Block
    from rlops.common.params_sources import ResolvedParams
    from rlops.pipeline_steps.infra.signal_store import SignalReading
    from rlops.registry.client import Tracker
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.reward_choice import RewardChoice
    from rlops.storage.backend import Storage
    from rlops.trace_store.store import TraceStore


@dataclass
class StepContext:
    """Params plus lazily built storage, tracker and pack for one step run.

    ``params`` is the project document as written (environment overrides applied); :attr:`config`
    is the typed, validated params of this run's scenario (project + pack, deep-merged): steps read
    their settings from it."""

    params: dict[str, Any]
    run_key: str
    scenario: str
    dry_run: bool = False
    dag_run_id: str | None = None
    """Airflow's id of the DAG run the step runs in (None outside a DAG): the pass's MLflow runs carry it"""
    _signals: list[SignalReading] | None = field(default=None, repr=False)
    _identity_checked: Path | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_scenario_name(self.scenario)  # a name reaches storage paths, DuckDB and DAG ids

    @classmethod
    def create(
        cls,
        scenario: str | None = None,
        run_key: RunKey | str | None = None,
        dry_run: bool = False,
        params: dict[str, Any] | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> StepContext:
        """A context for ``run_key`` (parsed strictly; None means the hour that has just ended)."""
        p = params if params is not None else load_params(overrides=overrides)
        if not scenario:
            scenario = check_scenario_name(p.get("scenario") or Params().scenario, "params 'scenario'")
        return cls(p, str(RunKey.of(run_key)), scenario, dry_run)

    @property
    def key(self) -> RunKey:
        """The run key as an interval."""
        return RunKey.parse(self.run_key)

    # ---- shared resources ---------------------------------------------------------------------
    @cached_property
    def resolved(self) -> ResolvedParams:
        """The project params merged with the pack's, validated once (bad keys: file, line, suggestion)."""
        return resolve_params(self.scenario, params=self.params)

    @property
    def config(self) -> Params:
        """The typed params of this run (see :mod:`rlops.common.params_model`)."""
        return self.resolved.model

    @cached_property
    def storage(self) -> Storage:

        return Storage.from_params(self.config.storage)

    @cached_property
    def tracker(self) -> Tracker:

        return Tracker.from_params(self.config.tracking, scenario=self.scenario)

    @cached_property
    def traces(self) -> TraceStore:
        from rlops.trace_store.store import TraceStore

        return TraceStore.from_params(self.config, self.storage)

    def reward_choice(self, explicit: str | None = None, pack: Pack | None = None) -> RewardChoice:
        """The reward function that applies to this run (one rule: :mod:`rlops.sandbox.reward_choice`),
        among the reward functions of ``pack`` when the step has loaded it already (a calibration
        changes no reward function), else of the pack as written."""
        return choose_reward(pack or self.load_pack(calibration=None), explicit, self.params.get("reward_fn"))

    def section(self, name: str) -> Block:
        """A typed params block (``train``, ``evaluate``…), the pack's overrides deep-merged in;
        the same as ``ctx.config.<name>``."""
        if name not in Params.model_fields:
            raise KeyError(f"params has no block {name!r}; expected one of {sorted(Params.model_fields)}")
        block: Block = getattr(self.config, name)
        return block

    @property
    def pack_dir(self) -> Path:
        """The scenario's pack folder; a pack there whose ``name:`` is another is refused
        (:func:`rlops.common.config.check_pack_identity`) before anything is read or written by it."""
        folder = scenarios_dir(self.params) / self.scenario
        if self._identity_checked != folder:
            check_pack_identity(folder)
            self._identity_checked = folder
        return folder

    def load_pack(self, calibration: str | None = "latest") -> Pack:
        """The scenario pack, with the latest sandbox calibration applied unless ``calibration`` is
        None (``latest`` when none exists yet means the pack as written)."""
        return self.pack_with(self.read_calibration(calibration) if calibration else None)

    def pack_with(self, calibration: dict[str, Any] | None) -> Pack:
        """The scenario pack with ``calibration`` applied (None: the pack as written) and the business
        signals in force bound: for a step that has read its calibration already."""
        from rlops.sandbox.pack import load_pack

        pack = load_pack(self.pack_dir, calibration=calibration)
        if pack.signal_weights:  # the business signals in force drive their reward weights
            pack.signals = {r.name: r.value for r in self.signal_readings(pack)}
        return pack

    def signal_readings(self, pack: Pack | None = None) -> list[SignalReading]:
        """The business signals the pack's reward functions declare, as in force for this step (read
        once: every load of the pack in one step binds the same values; see
        :mod:`rlops.pipeline_steps.infra.signal_store`). Empty for a pack without signal weights."""
        if self._signals is None:
            if pack is None:
                from rlops.sandbox.pack import load_pack

                pack = load_pack(self.pack_dir, check_liveness=False)
            by_name: dict[str, list[Any]] = {}
            for d in pack_declarations(pack.name, pack.reward_fns):
                by_name.setdefault(d.weight.signal, []).append(d)
            store = SignalStore(self.storage, self.config.signals)
            self._signals = [store.reading(name, decls) for name, decls in sorted(by_name.items())]
            for r in self._signals:
                if r.status == "last_good":
                    import logging

                    logging.getLogger(__name__).warning("signal %s: %s", r.name, r.note)
        return self._signals

    def read_calibration(self, version: str = "latest") -> dict[str, Any] | None:
        """A calibration version; ``latest`` is the newest one written for an interval that ended
        by this run key's end — a run for an earlier interval (a backfill, a re-run) never sees
        the calibration of a later hour."""
        uri = self.uri("calibrations", self.scenario, f"{version}.json")
        cal = self.storage.read_json(uri) if self.storage.exists(uri) else None
        if version != "latest" or cal is None or self._ends_by_run_key(str(cal.get("version"))) is not False:
            return cal
        best: tuple[Any, str] | None = None
        for other in self.storage.list(self.uri("calibrations", self.scenario), suffix=".json"):
            stem = other.rsplit("/", 1)[-1][: -len(".json")]
            if self._ends_by_run_key(stem):
                end = RunKey.parse(stem).end
                best = max(best, (end, other)) if best else (end, other)
        return self.storage.read_json(best[1]) if best else None

    def _ends_by_run_key(self, version: str) -> bool | None:
        """Whether the interval a calibration version names ended by this run key's end (None:
        not a run key)."""
        try:
            return RunKey.parse(version).end <= self.key.end
        except Exception:  # noqa: BLE001 - versions that are not run keys are taken as they are
            return None

    # ---- locations --------------------------------------------------------------------------------
    def uri(self, *parts: str) -> str:
        return self.storage.join(*parts)

    def report_uri(self, step: str, *parts: str) -> str:
        return self.storage.join("reports", step, self.scenario, self.run_key, *parts)

    def local_dir(self, *parts: str) -> Path:
        """A local working folder (checkpoints, exported models) under ``RLOPS_HOME/rlops-data``."""
        d = Path(resolve_local(self.config.local_dir)).joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d

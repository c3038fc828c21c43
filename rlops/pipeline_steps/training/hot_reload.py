"""Switching the reward function of a running training between iterations, operationally.

A request is a small JSON file in storage, ``control/<scenario>/<run_key>/reward_fn.json``
(``{"reward_fn": "v0", "requested_at": ...}``), written by ``rlops train switch-reward``
(or a DAG run's conf ``reward_switch_to`` / ``reward_switch_at_iteration``, which schedules one).
The training of that run key polls it before every iteration (:class:`RewardSwitchPoller`, the
``reward_source`` callable of :func:`rlops.model.ppo.train`); PPO swaps the function between two
iterations and the step records every switch on the training run: tags
``reward_switch.<iteration> = <old sha256> -> <new sha256>`` and the metric
``reward_switch_iteration``.

A request belongs to the training in progress when it is made: ``switch-reward`` refuses when no
training of the run key is running (a request left lying would otherwise switch a *later* training
of that run key, registered under the reward function it started with), and a training ignores any
request made before it started. A request the training cannot honour — a reward file added to the
pack after the training loaded it, or a file whose sha256 changed since the request — is refused
cleanly: the training goes on with the function it has, and says why in
``control/<scenario>/<run_key>/reward_fn.status.json`` and its log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.training.status import process_alive
from rlops.registry import tags as T

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.reward import RewardFunction

CONTROL_FILE = "reward_fn.json"
STATUS_FILE = "reward_fn.status.json"
log = logging.getLogger(__name__)


def control_uri(ctx: StepServices, run_key: str | None = None) -> str:
    return ctx.uri("control", ctx.scenario, run_key or ctx.run_key, CONTROL_FILE)


def running_training(ctx: StepServices) -> str | None:
    """The run id of the policy training of ``ctx.run_key`` in progress, or None. A run left
    RUNNING by a process that is gone (killed) does not count."""
    filt = (
        f"tags.`{T.STEP}` = '{T.TRAIN_POLICY}' and tags.`{T.RUN_KEY}` = '{ctx.run_key}' "
        "and attributes.status = 'RUNNING'"
    )
    runs = ctx.tracker._call(
        f"find the training of run key {ctx.run_key}",
        lambda c: c.search_runs([ctx.tracker.experiment_id], filt, max_results=10),
    )
    for run in runs:
        if process_alive(run.data.tags.get(T.PID), run.data.tags.get(T.HOST)):
            return str(run.info.run_id)
    return None


@dataclass(frozen=True)
class SwitchRequest(StepResult):
    """A request to the training in progress to switch its reward function (``rlops train switch-reward``)."""

    reward_fn: str
    """The reward function asked for (its label in the pack)."""
    reward_fn_sha256: str
    """The sha256 of its file when asked: a file changed since is refused by the training."""
    training_run: str
    """The MLflow run of the training asked to switch."""
    requested_at: str
    control_uri: str
    """The control file the training polls (not written on a dry run)."""
    scenario: str
    run_key: str
    dry_run: bool


def request_switch(ctx: StepContext, label: str) -> SwitchRequest:
    """Ask the training of ``ctx.run_key`` in progress to switch to reward function ``label``
    (checked now); a :class:`UserError` when no training of the run key is running, in a dry run
    too (which writes no request)."""
    fn = ctx.load_pack(calibration=None).reward_fn(label)  # KeyError: no such reward function
    training = running_training(ctx)
    if training is None:  # a dry run refuses as well: it must answer what the real request would
        raise UserError(
            f"train switch-reward --to {label}: no training of {ctx.scenario} run key {ctx.run_key} is "
            "running; a request now would be applied by no one (or by a later training, registered "
            "under another reward function). Start the training with the reward function wanted "
            "(--reward-fn), or schedule a switch with the DAG conf reward_switch_to"
        )
    req = {
        "reward_fn": label,
        "reward_fn_sha256": fn.version,
        "training_run": training,
        "requested_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    uri = control_uri(ctx)
    if not ctx.dry_run:
        ctx.storage.write_json(uri, req)
    return SwitchRequest(**req, control_uri=uri, scenario=ctx.scenario, run_key=ctx.run_key, dry_run=ctx.dry_run)


@dataclass
class RewardSwitchPoller:
    """``(iteration) -> RewardFunction | None`` for :func:`rlops.model.ppo.train`: the function a
    request (control file) or the schedule (``at_iteration``, ``label``) asks for, else None."""

    services: StepServices
    pack: Pack
    at_iteration: int | None = None
    label: str | None = None
    wrap: Callable[[RewardFunction], RewardFunction] | None = None
    #: when this training started: a request made earlier is stale and never applied
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    _answered: set[str] = field(default_factory=set)

    def __call__(self, iteration: int) -> RewardFunction | None:
        label = None
        if self.at_iteration is not None and self.label and iteration >= self.at_iteration:
            label = self.label
        uri = control_uri(self.services)
        if self.services.storage.exists(uri):
            label = self._requested(self.services.storage.read_json(uri)) or label
        if not label:
            return None
        try:
            fn = self.pack.reward_fn(label)
        except KeyError as exc:  # e.g. a reward file added to the pack after this training loaded it
            self._answer(
                label,
                "refused",
                f"this training has no reward function {label!r} ({exc}); it keeps the function it has",
            )
            return None
        return self.wrap(fn) if self.wrap is not None else fn

    def _requested(self, req: Any) -> str | None:
        """The label of a request this training may honour, or None (stale, or for another run)."""
        if not isinstance(req, dict) or not req.get("reward_fn"):
            return None
        label = str(req["reward_fn"])
        try:
            at = datetime.fromisoformat(str(req.get("requested_at")))
        except ValueError:
            at = None
        if at is not None and at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        if at is None or at < self.started_at.replace(microsecond=0):
            self._answer(
                label,
                "ignored",
                f"the request ({req.get('requested_at')}) is older than this training "
                f"({self.started_at.isoformat(timespec='seconds')})",
            )
            return None
        try:
            fn = self.pack.reward_fn(label)
        except KeyError:
            return label  # refused by the caller with the reason
        want = req.get("reward_fn_sha256")
        if want and want != fn.version:
            self._answer(
                label,
                "refused",
                f"reward function {label} is {fn.version[:12]} in this training, the "
                f"request asked for {str(want)[:12]}",
            )
            return None
        return label

    def _answer(self, label: str, status: str, reason: str) -> None:
        key = f"{status}:{label}:{reason}"
        if key in self._answered:
            return
        self._answered.add(key)
        log.warning("reward switch to %s %s: %s", label, status, reason)
        if not self.services.dry_run:
            try:
                self.services.storage.write_json(
                    self.services.uri("control", self.services.scenario, self.services.run_key, STATUS_FILE),
                    {
                        "reward_fn": label,
                        "status": status,
                        "reason": reason,
                        "at": datetime.now(UTC).isoformat(timespec="seconds"),
                    },
                )
            except Exception as exc:  # noqa: BLE001 - a status note must never stop a training
                log.warning("could not record the reward switch status: %s", exc)


def record_switches(run: Any, switches: list[Any]) -> list[dict[str, Any]]:
    """Tags and metrics of the training run for each switch; returns them for the step result."""
    out = [
        {
            "iteration": s.iteration,
            "global_step": s.global_step,
            "old_sha256": s.old_version,
            "new_sha256": s.new_version,
        }
        for s in switches
    ]
    if out:
        run.set_tags({f"reward_switch.{s['iteration']}": f"{s['old_sha256']} -> {s['new_sha256']}" for s in out})
        for s in out:
            run.log_metrics({"reward_switch_iteration": float(s["iteration"])}, step=int(s["global_step"]))
    return out

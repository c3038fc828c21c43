"""Switching the reward function of a running training between iterations, operationally.

A request is a small JSON file in storage, ``control/<scenario>/<run_key>/reward_fn.json``
(``{"reward_fn": "v0", "requested_at": ...}``), written by ``rlops train switch-reward``
(or a DAG run's conf ``reward_switch_to`` / ``reward_switch_at_iteration``, which schedules one).
The training of that run key polls it before every iteration (:class:`RewardSwitchPoller`, the
``reward_source`` callable of :func:`rlops.model.ppo.train`); PPO swaps the function between two
iterations and the step records every switch on the training run: tags
``reward_switch.<iteration> = <old sha256> -> <new sha256>`` and the metric
``reward_switch_iteration``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from rlops.pipeline_steps.infra.context import StepContext

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.reward import RewardFunction

CONTROL_FILE = "reward_fn.json"


def control_uri(ctx: StepContext, run_key: str | None = None) -> str:
    return ctx.uri("control", ctx.scenario, run_key or ctx.run_key, CONTROL_FILE)


def request_switch(ctx: StepContext, label: str) -> dict[str, Any]:
    """Ask the training of ``ctx.run_key`` to switch to reward function ``label`` (checked now)."""
    fn = ctx.load_pack(calibration=None).reward_fn(label)  # KeyError: no such reward function
    req = {"reward_fn": label, "reward_fn_sha256": fn.version,
           "requested_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    uri = control_uri(ctx)
    if not ctx.dry_run:
        ctx.storage.write_json(uri, req)
    return {**req, "control_uri": uri, "scenario": ctx.scenario, "run_key": ctx.run_key, "dry_run": ctx.dry_run}


@dataclass
class RewardSwitchPoller:
    """``(iteration) -> RewardFunction | None`` for :func:`rlops.model.ppo.train`: the function a
    request (control file) or the schedule (``at_iteration``, ``label``) asks for, else None."""

    ctx: StepContext
    pack: "Pack"
    at_iteration: int | None = None
    label: str | None = None
    wrap: Callable[["RewardFunction"], "RewardFunction"] | None = None

    def __call__(self, iteration: int) -> "RewardFunction | None":
        label = None
        if self.at_iteration is not None and self.label and iteration >= self.at_iteration:
            label = self.label
        uri = control_uri(self.ctx)
        if self.ctx.storage.exists(uri):
            label = str(self.ctx.storage.read_json(uri).get("reward_fn") or label or "")
        if not label:
            return None
        fn = self.pack.reward_fn(label)
        return self.wrap(fn) if self.wrap is not None else fn


def record_switches(run: Any, switches: list[Any]) -> list[dict[str, Any]]:
    """Tags and metrics of the training run for each switch; returns them for the step result."""
    out = [{"iteration": s.iteration, "global_step": s.global_step, "old_sha256": s.old_version,
            "new_sha256": s.new_version} for s in switches]
    if out:
        run.set_tags({f"reward_switch.{s['iteration']}": f"{s['old_sha256']} -> {s['new_sha256']}" for s in out})
        for s in out:
            run.log_metrics({"reward_switch_iteration": float(s["iteration"])}, step=int(s["global_step"]))
    return out

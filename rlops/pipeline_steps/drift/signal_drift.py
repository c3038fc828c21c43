"""Signal drift: has a business signal moved since the champion was trained?

A reward weight that follows a business signal (:mod:`rlops.sandbox.reward_signals`) changes what
a good policy is as soon as the signal moves, while the champion still acts on the weights of the
value it was trained with (its model version's ``signal.<name>`` tag; a champion without the tag was
trained at the signal's baseline). When the value in force is further from that than
``signals.retrain_delta`` of the signal's declared range, the drift monitor asks for a retrain, as
it does for any other drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rlops.registry.client import CHAMPION, policy_model_name

if TYPE_CHECKING:
    from rlops.common.params_model import SignalsParams
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.pipeline_steps.infra.signal_store import SignalReading
    from rlops.sandbox.pack import Pack


@dataclass(frozen=True)
class SignalShift:
    """One signal against the champion's value."""

    signal: str
    in_force: float
    status: str
    champion: float
    champion_version: str
    delta: float
    threshold: float
    moved: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"signal {self.signal} is {self.in_force:g}, champion v{self.champion_version} was trained at "
            f"{self.champion:g} (moved {self.delta:g}, threshold {self.threshold:g})"
        )


def signal_shifts(
    services: StepServices, pack: Pack, reward_fn: str, in_force: Sequence[SignalReading], cfg: SignalsParams
) -> list[SignalShift]:
    """Every signal the reward function that applies (labelled ``reward_fn``) declares, its reading
    ``in_force`` against the champion's (none: no champion), moved beyond ``cfg.retrain_delta``."""
    fn = pack.reward_fn(reward_fn)
    if not fn.signal_weights:
        return []
    name = policy_model_name(services.scenario)
    version = services.tracker.get_alias(name, CHAMPION)
    if version is None:  # the rule engine serves: the next retrain trains on the value in force anyway
        return []
    tags = services.tracker.model_version_tags(name, version)
    readings = {r.name: r for r in in_force}
    shifts: list[SignalShift] = []
    for sw in fn.signal_weights:
        if any(s.signal == sw.signal for s in shifts):
            continue
        reading = readings[sw.signal]
        trained = _number(tags.get(f"signal.{sw.signal}"), sw.baseline)
        delta = abs(reading.value - trained)
        threshold = cfg.retrain_delta * (sw.high - sw.low)
        shifts.append(
            SignalShift(sw.signal, reading.value, reading.status, trained, version, delta, threshold, delta > threshold)
        )
    return shifts


def _number(text: Any, default: float) -> float:
    try:
        return float(text) if text is not None else default
    except ValueError:
        return default

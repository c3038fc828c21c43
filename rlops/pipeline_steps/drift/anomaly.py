"""The champion return anomaly: has the live return fallen and stayed down, beyond what noise and
the sandbox's own error explain?

Each hourly drift check summarises the serving policy's live episode returns. The sandbox's
absolute level is only as good as its calibration (on the credit pack the champion's predicted
return went 0.70 → 0.78 → 0.66 over three hourly recalibrations of one unchanged world while the
live return held at 0.63–0.76), so a drop against the sandbox alone is not evidence that the world
changed. The check has two stages:

1. **Suspect.** The hour is a suspect when its mean return is
   ``sandbox − live > max(anomaly_drop × scale, z·se)`` below the calibrated sandbox's (``scale``:
   ``|sandbox mean|``, at least ``drift.scale_floor`` × its per-episode sd) **and**
   ``level − live > z·se`` below the *level before*: the pooled returns of the same policy's last
   ``drift.anomaly_level_hours`` unremarkable checks (``z = drift.anomaly_z``; ``se`` of the
   difference of the two means). Pooling several hours makes the reference's own noise small: a
   single previous hour contributes as much noise as the hour judged.
2. **Confirmed at the next hour** (``drift.anomaly_confirm: next_hour``). A lasting change — a
   reward rule the business now scores with, an outcome the sandbox does not see — keeps the
   return down; a chance hour reverts. The next check of the same policy confirms the suspect when
   that hour is still below the level before the fall and the two hours together are
   ``drift.anomaly_confirm_z`` standard errors below it (``level − mean(suspect, next) >
   confirm_z·se``). Only then is the anomaly raised (and the emergency retrain triggered), an hour
   after the fall. An unconfirmed suspect is dropped and the next hour is judged as a suspect on
   its own. ``anomaly_confirm: none`` raises the alarm at the suspect hour (one hour, one test).

Why two stages: the hourly means are independent draws whose spread is their standard error
(2,000 stable hours of 1,000 oracle episodes: spread 0.0297 against se 0.0296 on the credit pack,
0.0375 against 0.0374 on the complaint pack; the loan outcomes' own chance, not the mix of
requests). A one-hour test therefore trips in the normal tail beyond ``z`` every hour: at
``z = 3`` 0–4 of 1,999 stable checks per built-in pack (a false alarm every few weeks), and a
change whose only trace is the return must fall ``z`` standard errors of a *difference* in its
first hour to be seen — the 48-hour timeline's reward-rule change fell 3.4 (seen at 3, unseen at 4),
and a chance hour fell 3.3 in the twelve-hour timeline. One hour cannot tell them apart; two can:
a suspect needs only 2.5 standard errors against the pooled level, and a chance suspect's next
hour is an independent draw at the old level, so it confirms rarely. Simulated on normal hourly
means (in units of one hour's se, a lasting fall of 3.9 — the credit pack's champion under
``reward_v2``, 0.13 at se 0.033): one-hour ``z = 3`` against the previous hour, 2.9 false alarms
per 2,000 hours and the fall seen within 2 h 37 % of the time; the defaults here (6 level hours,
``z = 2.5``, confirm at 3.5) 0.3 false alarms per 2,000 hours, seen within 2 h 83 %.
``bench/anomaly_false_alarms.py`` counts the product's verdicts on each built-in pack's stable hours.

State: the level's hours, and a pending suspect with the level it fell from, are kept in the drift
state (``drift_state/<scenario>/live_return.json``), read and replaced by each real check, so
the confirmation works across separate scheduler task processes. The file also keeps the state as
it was before the check of its run key, so a retried or repeated check of the same run key decides
from the same state as the first. A change of the serving policy starts a new level (another
policy's returns are no reference); an alarm starts a new level at the confirming hour (the world
changed). A dry run reads the state and writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rlops.common.step_result import StepResult
from rlops.pipeline_steps.promotion.gate_stats import return_scale

if TYPE_CHECKING:
    from rlops.common.params_drift import DriftParams
    from rlops.pipeline_steps.infra.services import StepServices

CONFIRM_RULES = ("next_hour", "none")


@dataclass(frozen=True)
class ReturnSummary:
    """One window's live episode returns, as the next check needs them."""

    mean: float
    var: float
    episodes: int
    policy_version: str | None
    run_key: str

    @classmethod
    def of(cls, returns: np.ndarray, policy_version: str | None, run_key: str) -> ReturnSummary:
        r = np.asarray(returns, dtype=np.float64)
        return cls(
            float(r.mean()) if r.size else math.nan,
            float(r.var(ddof=1)) if r.size > 1 else math.nan,
            int(r.size),
            policy_version,
            run_key,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReturnSummary:
        return cls(float(d["mean"]), float(d["var"]), int(d["episodes"]), d.get("policy_version"), str(d["run_key"]))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pooled(parts: list[ReturnSummary] | tuple[ReturnSummary, ...], run_key: str = "level") -> ReturnSummary:
    """The summary of all the parts' episodes together: the episode-weighted mean and the sample
    variance of the concatenated returns (within-hour and between-hour spread)."""
    n = sum(p.episodes for p in parts)
    if n == 0:
        return ReturnSummary(math.nan, math.nan, 0, None, run_key)
    mean = sum(p.episodes * p.mean for p in parts) / n
    within = sum((p.episodes - 1) * p.var for p in parts if p.episodes > 1 and math.isfinite(p.var))
    between = sum(p.episodes * (p.mean - mean) ** 2 for p in parts)
    var = (within + between) / (n - 1) if n > 1 else math.nan
    return ReturnSummary(mean, var, n, parts[0].policy_version, run_key)


def _se(a: ReturnSummary, b: ReturnSummary) -> float:
    if a.episodes < 2 or b.episodes < 2 or not (math.isfinite(a.var) and math.isfinite(b.var)):
        return 0.0
    return math.sqrt(a.var / a.episodes + b.var / b.episodes)


@dataclass(frozen=True)
class AnomalyRule:
    """The settings of the check (``drift.anomaly_*``; see the module docstring)."""

    min_drop: float
    """A suspect's live mean must be at least this share of the sandbox's return scale below it."""
    z: float
    """Standard errors a suspect's fall must exceed against the sandbox and against the level before."""
    confirm: Literal["next_hour", "none"]
    """``next_hour``: the alarm waits for the next check to confirm; ``none``: it fires at the suspect."""
    confirm_z: float
    """Standard errors by which the suspect and the next hour together must stay below the level."""
    level_hours: int
    """Unremarkable checks of the same policy pooled into the level before."""
    scale_floor: float
    """The sandbox's return scale is ``|its mean|``, at least this × its per-episode standard deviation."""

    @classmethod
    def of(cls, drift: Any) -> AnomalyRule:
        """The rule of a ``drift:`` params block (typed or a plain namespace)."""
        return cls(
            float(drift.anomaly_drop),
            float(drift.anomaly_z),
            drift.anomaly_confirm,
            float(drift.anomaly_confirm_z),
            int(drift.anomaly_level_hours),
            float(drift.scale_floor),
        )

    def least_drop(self, sandbox: ReturnSummary) -> float:
        """``min_drop`` in the sandbox's reward units."""
        sd = math.sqrt(sandbox.var) if math.isfinite(sandbox.var) and sandbox.var >= 0 else float("nan")
        scale = return_scale(sandbox.mean, sd, self.scale_floor)
        return self.min_drop * scale if math.isfinite(scale) else 0.0


@dataclass(frozen=True)
class AnomalyState:
    """What the check keeps between runs: the level's hours (oldest first) and a pending suspect
    with the level it fell from."""

    history: tuple[ReturnSummary, ...] = ()
    suspect: ReturnSummary | None = None
    suspect_level: ReturnSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "history": [h.to_dict() for h in self.history],
            "suspect": None if self.suspect is None else self.suspect.to_dict(),
            "suspect_level": None if self.suspect_level is None else self.suspect_level.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnomalyState:
        if "mean" in d:  # the earlier file: the previous check's summary alone
            return cls((ReturnSummary.from_dict(d),))
        sus, lvl = d.get("suspect"), d.get("suspect_level")
        return cls(
            tuple(ReturnSummary.from_dict(h) for h in d.get("history") or []),
            None if sus is None else ReturnSummary.from_dict(sus),
            None if lvl is None else ReturnSummary.from_dict(lvl),
        )


@dataclass(frozen=True)
class AnomalyConfirmation:
    """The next hour's test of a pending suspect of the same policy."""

    suspect_run_key: str
    level_mean: float
    """The mean of the level the suspect fell from."""
    next_below_level: float
    """How far this hour's mean is below that level."""
    pair_drop: float
    """How far the suspect and this hour together are below the level."""
    pair_threshold: float
    """``confirm_z`` standard errors of that drop."""
    confirmed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReturnAnomaly(StepResult):
    """One check's verdict: the alarm, the suspect, the drops and their thresholds, and which
    references were used (see the module docstring)."""

    anomaly: bool
    """The alarm: a fall confirmed (or, with ``anomaly_confirm: none``, a suspect)."""
    suspect: bool
    """This hour fell below the sandbox and the level before; the next hour confirms it or not."""
    drop: float
    """The sandbox's mean return minus this hour's."""
    threshold: float
    """The drop below the sandbox a suspect must exceed."""
    reference: str
    """What this hour was judged against, or why nothing."""
    confirmation: AnomalyConfirmation | None = None
    """The test of the pending suspect (None: no suspect of this policy pending)."""
    level_drop: float | None = None
    """The level before minus this hour's mean (None: no level to compare with)."""
    level_threshold: float | None = None
    """The fall below the level a suspect must exceed."""
    level_hours: int | None = None
    level_run_keys: tuple[str, ...] | None = None
    """The run keys of the checks pooled into the level before."""
    suspect_cleared: str | None = None
    """Why a suspect of this hour is not kept: the same check already alarms for another cause."""

    def as_dict(self) -> dict[str, Any]:
        """Only the fields that apply, in the order the drift report has always shown them."""
        out: dict[str, Any] = dict(anomaly=self.anomaly, suspect=self.suspect, drop=self.drop, threshold=self.threshold)
        if self.confirmation is not None:
            out["confirmation"] = self.confirmation.as_dict()
        if self.level_drop is not None:
            out.update(
                level_drop=self.level_drop,
                level_threshold=self.level_threshold,
                level_hours=self.level_hours,
                level_run_keys=list(self.level_run_keys or ()),
            )
        out["reference"] = self.reference
        if self.suspect_cleared is not None:
            out["suspect_cleared"] = self.suspect_cleared
        return out


def _confirmation(live: ReturnSummary, state: AnomalyState, rule: AnomalyRule) -> AnomalyConfirmation | None:
    """The next hour's test of a pending suspect of the same policy (None: nothing to confirm)."""
    sus, level = state.suspect, state.suspect_level
    if rule.confirm != "next_hour" or sus is None or level is None or sus.policy_version != live.policy_version:
        return None
    pair = pooled([sus, live], "suspect+next")
    drop = level.mean - pair.mean
    threshold = rule.confirm_z * _se(pair, level)
    return AnomalyConfirmation(
        suspect_run_key=sus.run_key,
        level_mean=level.mean,
        next_below_level=level.mean - live.mean,
        pair_drop=drop,
        pair_threshold=threshold,
        confirmed=bool(drop > threshold and level.mean - live.mean > 0),
    )


def return_anomaly(
    live: ReturnSummary,
    sandbox: ReturnSummary,
    state: AnomalyState,
    rule: AnomalyRule,
    alarmed_for: str | None = None,
) -> tuple[ReturnAnomaly, AnomalyState]:
    """The verdict (pure) and the state the next check starts from (see the module docstring).
    ``alarmed_for``: why the same check already raises the alarm (input drift), when it
    does — a suspect of that hour is then not kept for the next hour to confirm: the fall has its
    cause and its retrain, and the level starts again from this hour (one alarm per cause)."""
    verdict, after = _return_anomaly(live, sandbox, state, rule)
    if alarmed_for and after.suspect is not None:
        cleared = replace(verdict, suspect_cleared=f"the hour already alarms for {alarmed_for}")
        return cleared, AnomalyState((live,))
    return verdict, after


def _return_anomaly(
    live: ReturnSummary, sandbox: ReturnSummary, state: AnomalyState, rule: AnomalyRule
) -> tuple[ReturnAnomaly, AnomalyState]:
    if live.episodes == 0 or sandbox.episodes == 0:
        return ReturnAnomaly(anomaly=False, suspect=False, drop=0.0, threshold=0.0, reference="none"), state
    drop = sandbox.mean - live.mean
    threshold = max(rule.least_drop(sandbox), rule.z * _se(live, sandbox))
    confirmation = _confirmation(live, state, rule)

    def verdict(reference: str, anomaly: bool = False, **found: Any) -> ReturnAnomaly:
        return ReturnAnomaly(
            anomaly=anomaly,
            suspect=False,
            drop=drop,
            threshold=threshold,
            reference=reference,
            confirmation=confirmation,
            **found,
        )

    if confirmation is not None and confirmation.confirmed:
        stayed = f"confirmed: {confirmation.suspect_run_key} and this hour stayed down"
        return verdict(stayed, anomaly=True), AnomalyState((live,))
    history = tuple(h for h in state.history if h.policy_version == live.policy_version and h.episodes > 1)
    if not history:
        alone = f"none: no earlier check of {live.policy_version or 'this policy'} to compare with"
        return verdict(alone), AnomalyState((live,))
    hours = history[-rule.level_hours :]
    level = pooled(hours)
    fall, fall_threshold = level.mean - live.mean, rule.z * _se(live, level)
    levelled = verdict(
        "sandbox and level before",
        level_drop=fall,
        level_threshold=fall_threshold,
        level_hours=len(hours),
        level_run_keys=tuple(h.run_key for h in hours),
    )
    if drop > threshold and fall > fall_threshold:
        if rule.confirm == "none":
            return replace(levelled, anomaly=True), AnomalyState((live,))
        return replace(levelled, suspect=True), AnomalyState(history, live, level)
    return levelled, AnomalyState((*history, live)[-rule.level_hours :])


def check_return_anomaly(
    ctx: StepServices,
    drift: DriftParams,
    live_returns: np.ndarray,
    sandbox_returns: np.ndarray,
    policy_version: str | None,
    alarmed_for: str | None = None,
) -> ReturnAnomaly:
    """The drift check's call: the verdict from the kept state, which a real check then replaces
    (nothing is written on a dry run) under the ``drift:`` block's rule (``drift``); ``alarmed_for`` as
    :func:`return_anomaly` takes it."""
    live = ReturnSummary.of(live_returns, policy_version, ctx.run_key)
    sandbox = ReturnSummary.of(sandbox_returns, policy_version, ctx.run_key)
    state_uri = ctx.uri("drift_state", ctx.scenario, "live_return.json")
    doc = ctx.storage.read_json(state_uri) if ctx.storage.exists(state_uri) else None
    state = AnomalyState()
    if isinstance(doc, dict) and "state" in doc:
        # a repeated check of the same run key starts from the state its first check started from
        state = AnomalyState.from_dict(doc["prior"] if doc.get("run_key") == ctx.run_key else doc["state"])
    elif isinstance(doc, dict) and str(doc.get("run_key")) != ctx.run_key:
        state = AnomalyState.from_dict(doc)
    verdict, after = return_anomaly(live, sandbox, state, AnomalyRule.of(drift), alarmed_for)
    if not ctx.dry_run and live.episodes > 1:
        ctx.storage.write_json(state_uri, {"run_key": ctx.run_key, "prior": state.to_dict(), "state": after.to_dict()})
    return verdict


__all__ = [
    "CONFIRM_RULES",
    "AnomalyConfirmation",
    "AnomalyRule",
    "AnomalyState",
    "ReturnAnomaly",
    "ReturnSummary",
    "check_return_anomaly",
    "pooled",
    "return_anomaly",
]

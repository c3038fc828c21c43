"""The reward checks of ``rlops stress``: every action stepped on every edge state, and what the
reward function made of it. Pure functions of a loaded pack; no storage, no MLflow.

Each action is stepped on every edge state (:mod:`rlops.pipeline_steps.stress.edge_states`) with
``illegal_action="noop"`` (so masked actions are covered too), once in the pack's default
simulation and once in a harsh one (every action fails half the time, latency jitter up to 60 s:
:mod:`rlops.pipeline_steps.stress.perturbation`), so the reward sees errors and extreme latencies
as well. Delayed (``settle_on``) components are settled on every step, so a NaN held back for
later is still seen. A check fails on NaN, ±inf, ``|r|`` over the bound, a breakdown that does not
sum to the total, and a component that raises.

Gaming probes live in :mod:`rlops.pipeline_steps.stress.probes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

import torch

from rlops.pipeline_steps.stress.edge_states import describe_state
from rlops.pipeline_steps.stress.perturbation import STRESS_PROFILE, perturbed_pack
from rlops.pipeline_steps.stress.probes import ProbeResult
from rlops.sandbox.env import BatchedEnv, NoLegalActionError
from rlops.sandbox.pack import Pack
from rlops.sandbox.reward import RewardFunction
from rlops.sandbox.reward_runtime import RewardError, RewardRuntime

Tensor = torch.Tensor


class HarshSimulation(TypedDict):
    """The reward checks' second simulation: every action's error rate, and the latency jitter range (ms)."""

    error_rate: float
    jitter_ms: tuple[float, float]


HARSH: HarshSimulation = {"error_rate": 0.5, "jitter_ms": (0.0, 60_000.0)}


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Finding:
    """One failed reward check: which check, on which action and simulation, how often."""

    check: str
    action: str
    sim: str
    count: int
    message: str
    component: str | None = None
    example: dict[str, Any] | None = None


@dataclass
class ActionCoverage:
    """How one action was exercised on the edge states (both simulations together)."""

    action: str
    states: int = 0
    legal: int = 0
    masked: int = 0
    non_finite: int = 0
    out_of_bounds: int = 0
    sum_mismatch: int = 0
    raised: int = 0
    clipped: int = 0
    max_abs_reward: float = 0.0


@dataclass
class RewardStress:
    """Everything the reward-function half of the stress test found."""

    reward_fn: str
    reward_fn_sha256: str
    bound: float
    coverage: list[ActionCoverage]
    findings: list[Finding]
    probes: list[ProbeResult]
    baselines: dict[str, float]
    field_coverage: dict[str, int] = field(default_factory=dict)
    visibility: dict[str, dict[str, int]] = field(default_factory=dict)
    dead_ends: int = 0
    constraints: list[Any] = field(default_factory=list)
    """One :class:`rlops.pipeline_steps.stress.governance.ConstraintResult` per rule constraint."""
    signal_range: list[dict[str, Any]] = field(default_factory=list)
    """Per end of the business signals' declared ranges: ``{signals, weights, findings, probes_failed}``
    (:mod:`rlops.pipeline_steps.stress.signal_range`)."""

    @property
    def passed(self) -> bool:
        return not self.findings and all(p.passed for p in self.probes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        return d


# --------------------------------------------------------------------------- reward checks
class _SettleEveryStep(RewardRuntime):
    """Pays delayed components on every step, so the checks see every component's value."""

    last: tuple[Tensor, Tensor] | None = None

    def compute(
        self, t: Any, actions: Tensor, repeat_count: Tensor, done: Tensor, global_step: int
    ) -> tuple[Tensor, Tensor]:
        total, breakdown = super().compute(t, actions, repeat_count, torch.ones_like(done), global_step)
        self.last = (total, breakdown)
        return total, breakdown


def step_all(
    pack: Pack, fn: RewardFunction, S: Tensor, action: int, profile: str | None = None, seed: int = 0
) -> tuple[Tensor, Tensor, list[str], bool]:
    """Step ``action`` on every state of ``S``: ``(total, breakdown, names, dead_end)``.

    Raises :class:`RewardError` when a component raises. ``dead_end`` says the step left a state
    with no legal action (the scenario's concern, not the reward's); the rewards still count.
    """
    n = S.shape[0]
    env = BatchedEnv(pack.scenario, fn, num_envs=n, profile=profile, illegal_action="noop")
    probe = _SettleEveryStep(fn, n, env.device, env.action_names, env.role_names)
    env.reward = probe
    hist = torch.zeros((n, pack.scenario.layout.history_len), dtype=torch.long)
    hist[:, -1] = S[:, pack.scenario.columns["episode.last_action"]].long()
    env.load_state_dict(
        {
            "S": S.clone(),
            "seeds": seed + torch.arange(n),
            "episodes": torch.zeros(n, dtype=torch.long),
            "history": hist,
            "ep_return": torch.zeros(n),
            "pending": probe.pending.clone(),
            "global_step": torch.tensor(0),
        }
    )
    dead_end = False
    try:
        env.step(torch.full((n,), action, dtype=torch.long))
    except NoLegalActionError:
        dead_end = True
    assert probe.last is not None
    return probe.last[0], probe.last[1], probe.names, dead_end


def _first_raising_row(pack: Pack, fn: RewardFunction, S: Tensor, action: int, profile: str | None) -> int:
    """Binary search for one state on which the reward raises (the batch as a whole does)."""
    rows = torch.arange(S.shape[0])
    while rows.numel() > 1:
        half = rows[: rows.numel() // 2]
        try:
            step_all(pack, fn, S[half], action, profile)
            rows = rows[rows.numel() // 2 :]
        except RewardError:
            rows = half
    return int(rows[0])


def reward_simulations(pack: Pack) -> list[tuple[str, Pack, str | None]]:
    """``(name, pack, profile)`` of the simulations the reward checks run in: the pack's default
    one, and the :data:`HARSH` one (under :data:`~rlops.pipeline_steps.stress.perturbation.STRESS_PROFILE`)."""
    harsh = perturbed_pack(pack, action_error_rate=HARSH["error_rate"], jitter_ms=HARSH["jitter_ms"])
    return [("nominal", pack, None), ("harsh", harsh, STRESS_PROFILE)]


def check_reward(
    pack: Pack,
    fn: RewardFunction,
    S: Tensor,
    bound: float,
    tolerance: float = 1e-4,
    sims: Sequence[tuple[str, Pack, str | None]] | None = None,
) -> tuple[list[ActionCoverage], list[Finding], int]:
    """Every action on every edge state in each simulation: NaN/inf, bound, breakdown sum, raises."""
    sims = sims or [("nominal", pack, None)]
    coverage = [ActionCoverage(a) for a in pack.scenario.action_names]
    findings: list[Finding] = []
    dead_ends = 0
    for sim_name, sim_pack, profile in sims:
        masks = sim_pack.scenario.action_masks(S)
        for a, name in enumerate(pack.scenario.action_names):
            cov = coverage[a]
            cov.states += S.shape[0]
            cov.legal += int(masks[:, a].sum())
            cov.masked += int((~masks[:, a]).sum())
            try:
                total, bd, names, dead = step_all(sim_pack, fn, S, a, profile)
            except RewardError as exc:
                cov.raised += 1
                # one example state per distinct error is enough (the search costs ~log2(n) steps)
                seen = any(f.check == "raised" and f.message == str(exc) for f in findings)
                example = None if seen else describe_state(pack, S[_first_raising_row(sim_pack, fn, S, a, profile)])
                findings.append(Finding("raised", name, sim_name, 1, str(exc), example=example))
                continue
            dead_ends += int(dead)
            findings += _value_findings(pack, cov, name, sim_name, S, total, bd, names, bound, tolerance)
    return coverage, findings, dead_ends


def _value_findings(
    pack: Pack,
    cov: ActionCoverage,
    action: str,
    sim: str,
    S: Tensor,
    total: Tensor,
    bd: Tensor,
    names: list[str],
    bound: float,
    tol: float,
) -> list[Finding]:
    out: list[Finding] = []
    n = S.shape[0]
    finite_rows = torch.isfinite(total) & torch.isfinite(bd).all(dim=1)
    bad = ~finite_rows
    cov.non_finite += int(bad.sum())
    if bool(bad.any()):
        col_bad = ~torch.isfinite(bd)
        # the clip entry (clipped total minus raw total) inherits any component's NaN: blame it
        # only when no component is at fault
        sources = [j for j, c in enumerate(names) if c != "clip" and bool(col_bad[:, j].any())]
        for j in sources or range(len(names)):
            comp = names[j]
            rows = col_bad[:, j]
            if bool(rows.any()):
                i = int(rows.nonzero()[0, 0])
                kind = "NaN" if bool(torch.isnan(bd[rows, j]).any()) else "an infinite value"
                out.append(
                    Finding(
                        "nan" if kind == "NaN" else "inf",
                        action,
                        sim,
                        int(rows.sum()),
                        f"reward component '{comp}' returned {kind} on {int(rows.sum())} of {n} edge "
                        f"states of action '{action}' ({sim} simulation)",
                        comp,
                        describe_state(pack, S[i]),
                    )
                )
        if not any(f.check in ("nan", "inf") for f in out):
            i = int(bad.nonzero()[0, 0])
            out.append(
                Finding(
                    "nan",
                    action,
                    sim,
                    int(bad.sum()),
                    f"the total reward of action '{action}' is "
                    f"not finite on {int(bad.sum())} of {n} edge states ({sim} simulation)",
                    None,
                    describe_state(pack, S[i]),
                )
            )
    t, b = torch.where(finite_rows, total, 0.0), torch.where(finite_rows.unsqueeze(1), bd, 0.0)
    cov.max_abs_reward = max(cov.max_abs_reward, float(t.abs().max()) if n else 0.0)
    over = finite_rows & (t.abs() > bound + 1e-6)
    cov.out_of_bounds += int(over.sum())
    if bool(over.any()):
        i = int(over.nonzero()[0, 0])
        out.append(
            Finding(
                "out_of_bounds",
                action,
                sim,
                int(over.sum()),
                f"|reward| of action '{action}' exceeds the bound {bound:g} on {int(over.sum())} of {n} "
                f"edge states (largest {float(t.abs().max()):.4g}; {sim} simulation)",
                None,
                describe_state(pack, S[i]),
            )
        )
    mismatch = finite_rows & ((b.sum(dim=1) - t).abs() > tol * (1 + t.abs()))
    cov.sum_mismatch += int(mismatch.sum())
    if bool(mismatch.any()):
        i = int(mismatch.nonzero()[0, 0])
        out.append(
            Finding(
                "breakdown_sum",
                action,
                sim,
                int(mismatch.sum()),
                f"the breakdown of action '{action}' does not sum to the total on {int(mismatch.sum())} "
                f"of {n} edge states (e.g. {float(b[i].sum()):.6g} vs {float(t[i]):.6g})",
                None,
                describe_state(pack, S[i]),
            )
        )
    if "clip" in names:
        cov.clipped += int((b[:, names.index("clip")].abs() > 1e-9).sum())
    return out


def visibility_coverage(pack: Pack, S: Tensor) -> dict[str, dict[str, int]]:
    out = {}
    for path, expr in pack.scenario.visible.items():
        v = expr(S)
        out[path] = {"visible": int(v.sum()), "hidden": int((~v).sum())}
    return out

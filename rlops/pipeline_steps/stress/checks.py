"""The computations behind ``rlops stress``: edge states, reward checks and perturbed
simulations. Pure functions of a loaded pack; no storage, no MLflow.

Edge states
    A pool of reachable states (random and rule-engine rollouts) is overwritten field by field
    with edge values: every range boundary, one step inside it, the midpoint, zero when in range,
    ±6σ (or ±1e6) on an unbounded side, every enum value, both bools, every ``episode.*`` extreme.
    The first rows change one field at a time, two rows are all-minimum and all-maximum corners,
    the rest mix edges at random. Each action is then stepped on every state with
    ``illegal_action="noop"`` (so masked actions are covered too), once in the pack's default
    simulation and once in a harsh one (every action fails half the time, latency jitter up to
    60 s), so the reward sees errors and extreme latencies as well. Delayed (``settle_on``)
    components are settled on every step, so a NaN held back for later is still seen.

Gaming probes live in :mod:`rlops.pipeline_steps.stress.probes`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

import torch

from rlops.pipeline_steps.stress.probes import ProbeResult
from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.env import BatchedEnv, NoLegalActionError
from rlops.sandbox.pack import Pack, apply_calibration
from rlops.sandbox.policies import random_policy, rule_policy
from rlops.sandbox.reward import RewardError, RewardFunction, RewardRuntime
from rlops.sandbox.spec import FieldSpec, parse_scenario
from rlops.sandbox.yaml_lines import load_yaml

Tensor = torch.Tensor


class HarshSimulation(TypedDict):
    error_rate: float
    jitter_ms: tuple[float, float]


HARSH: HarshSimulation = {"error_rate": 0.5, "jitter_ms": (0.0, 60_000.0)}
STRESS_PROFILE = "stress"


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


# --------------------------------------------------------------------------- edge states
def field_edges(f: FieldSpec) -> list[float]:
    """Edge values of one field (enum codes, bools as 0/1)."""
    if f.type == "enum":
        return [float(i) for i in range(len(f.values))]
    if f.type == "bool":
        return [0.0, 1.0]
    lo, hi = f.min, f.max
    step = 1.0 if f.type == "int" else None
    out: list[float] = []
    if lo is not None and hi is not None:
        d = step if step is not None and hi - lo >= 2 else (hi - lo) * 1e-3
        out += [lo, lo + d, (lo + hi) / 2, hi - d, hi]
    spread = _init_spread(f)
    if lo is None:
        out += [spread[0], -1e6]
    else:
        out.append(lo)
    if hi is None:
        out += [spread[1], 1e6]
    else:
        out.append(hi)
    if (lo is None or lo < 0) and (hi is None or hi > 0):
        out.append(0.0)
    if f.type == "int":
        out = [float(math.floor(v)) for v in out]
    return sorted(set(out))


def _init_spread(f: FieldSpec) -> tuple[float, float]:
    p = f.init.params
    if f.init.dist == "normal" and all(isinstance(p.get(k), (int, float)) for k in ("mean", "std")):
        return float(p["mean"]) - 6 * float(p["std"]), float(p["mean"]) + 6 * float(p["std"])
    if f.init.dist == "lognormal" and all(isinstance(p.get(k), (int, float)) for k in ("mean", "sigma")):
        return math.exp(float(p["mean"]) - 6 * float(p["sigma"])), math.exp(float(p["mean"]) + 6 * float(p["sigma"]))
    return -1e3, 1e3


def episode_edges(scn: CompiledScenario) -> dict[str, list[float]]:
    h, a = scn.spec.horizon, scn.n_actions
    n_seg = max((len(p.population) for p in scn.spec.profiles.values()), default=0)
    return {
        "episode.step": [0.0, 1.0, h - 1.0],
        "episode.elapsed_ms": [0.0, 1e3, 1e6],
        "episode.last_action": [float(i) for i in range(a + 1)],
        "episode.repeat_count": [0.0, 1.0, 2.0, float(h)],
        "episode.error": [0.0, 1.0],
        "episode.errors": [0.0, float(h)],
        "episode.latency_ms": [0.0, 1e4],
        "episode.segment": [float(i) for i in range(n_seg + 1)],
    }


def reachable_states(pack: Pack, fn: RewardFunction, n: int, seed: int) -> Tensor:
    """States visited by random and rule-engine rollouts (every stage of an episode)."""
    snaps = []
    for k, policy in enumerate((random_policy(seed), rule_policy)):
        env = BatchedEnv(pack.scenario, fn, num_envs=max(n // 2, 64), illegal_action="noop")
        env.reset(seed + k * 1_000_003)
        for _ in range(pack.scenario.spec.horizon):
            snaps.append(env.S.clone())
            try:
                env.step(policy(env))
            except (RewardError, NoLegalActionError):
                break  # a broken reward is reported by the edge checks themselves
    return torch.cat(snaps)


def edge_states(
    pack: Pack, fn: RewardFunction, n: int = 2048, seed: int = 0, mix_prob: float = 0.3
) -> tuple[Tensor, dict[str, int]]:
    """``n`` edge states ``S[n, C]`` and how many rows set each field to one of its edges."""
    scn = pack.scenario
    gen = torch.Generator().manual_seed(seed)
    pool = reachable_states(pack, fn, n, seed)
    S = pool[torch.randint(pool.shape[0], (n,), generator=gen)].clone()
    edges = {f.path: field_edges(f) for f in scn.spec.fields}
    edges.update(episode_edges(scn))
    singles = [(scn.columns[p], v) for p, vals in edges.items() for v in vals]
    if len(singles) + 2 > n:
        raise ValueError(
            f"stress.edge_states={n} is too small: the one-at-a-time edge rows alone need {len(singles) + 2}"
        )
    for i, (col, v) in enumerate(singles):
        S[i, col] = v
    row_min, row_max = len(singles), len(singles) + 1
    for p, vals in edges.items():
        if p.startswith("episode."):
            continue
        S[row_min, scn.columns[p]], S[row_max, scn.columns[p]] = vals[0], vals[-1]
    start = len(singles) + 2
    for p, vals in edges.items():
        col = scn.columns[p]
        pick = torch.rand(n - start, generator=gen) < mix_prob
        vals_t = torch.tensor(vals, dtype=torch.float32)
        choice = vals_t[torch.randint(len(vals), (n - start,), generator=gen)]
        S[start:, col] = torch.where(pick, choice, S[start:, col])
    S = scn.clamp(S)
    counts = {
        p: int(torch.isin(S[:, scn.columns[p]], torch.tensor(vals, dtype=torch.float32)).sum())
        for p, vals in edges.items()
    }
    return S, counts


def describe_state(pack: Pack, row: Tensor) -> dict[str, Any]:
    """One state row as ``{field: value}`` with enum names and bools decoded."""
    out: dict[str, Any] = {}
    for path, col in pack.scenario.columns.items():
        v = float(row[col])
        f = pack.scenario.fields.get(path)
        if f is not None and f.type == "enum":
            out[path] = f.values[int(v)] if 0 <= int(v) < len(f.values) else v
        elif (f is not None and f.type == "bool") or path == "episode.error":
            out[path] = v > 0.5
        else:
            out[path] = round(v, 6)
    return out


# --------------------------------------------------------------------------- perturbed scenarios
def scaled_error_rate(rate: float, k: float) -> float:
    """An error rate ``k`` times as bad: each call fails as often as one of ``k`` calls in a row
    would, ``1 − (1 − rate)^k`` — about ``k · rate`` for a rare error, never a certain one. (``k ·
    rate`` capped at 1 turned five times a flaky API's 0.26 into an API that always fails: a
    world no policy completes an episode in, which tells policies apart only by how they fail.)"""
    return float(1.0 - (1.0 - min(max(rate, 0.0), 1.0)) ** k)


def perturbed_pack(
    pack: Pack,
    base_profile: str | None = None,
    latency: float = 1.0,
    errors: float = 1.0,
    segment: str | None = None,
    action_error_rate: float | None = None,
    jitter_ms: tuple[float, float] | None = None,
) -> Pack:
    """A copy of ``pack`` with a profile :data:`STRESS_PROFILE`: ``base_profile`` with action
    latencies and jitter ×``latency``, error rates ×``errors`` (:func:`scaled_error_rate`), optionally every
    episode in population segment ``segment``, every action's own error rate set to
    ``action_error_rate`` and the jitter range replaced by ``jitter_ms``."""
    doc = load_yaml(pack.path / "scenario.yaml")
    if pack.calibration:
        doc = apply_calibration(doc, pack.calibration)
    doc = copy.deepcopy(doc)
    base = base_profile or pack.scenario.spec.default_profile
    if not doc.get("simulation"):  # no simulation block: the implicit empty "sandbox" profile
        doc["simulation"] = {"profiles": {base: {}}}
    profiles = doc["simulation"]["profiles"]
    if base not in profiles:
        raise ValueError(f"unknown simulation profile {base!r} (profiles of {pack.name}: {sorted(profiles)})")
    for a in doc["actions"]:
        lat = a.get("latency_ms")
        if isinstance(lat, dict):
            for k in ("mean", "std"):
                if k in lat:
                    lat[k] = float(lat[k]) * latency
        elif lat is not None:
            a["latency_ms"] = float(lat) * latency
        rate = float(a.get("error_rate", 0.0)) if action_error_rate is None else action_error_rate
        a["error_rate"] = rate if action_error_rate is not None else scaled_error_rate(rate, errors)
    prof = copy.deepcopy(profiles[base])
    jit = prof.get("latency_jitter_ms") or {"min": 0.0, "max": 0.0}
    lo, hi = jitter_ms if jitter_ms is not None else (float(jit["min"]) * latency, float(jit["max"]) * latency)
    prof["latency_jitter_ms"] = {"min": lo, "max": hi}
    prof["action_latency_ms"] = {
        name: {k: float(v) * latency for k, v in own.items()}
        for name, own in (prof.get("action_latency_ms") or {}).items()
    }
    rates = prof.get("error_rates") or {}
    prof["error_rates"] = {api: scaled_error_rate(float(r), errors) for api, r in rates.items()}
    if segment is not None:
        shift = _find_shift(profiles, segment)
        if shift is None:
            raise ValueError(f"unknown population segment {segment!r}: no profile of {pack.name} declares it")
        shift = copy.deepcopy(shift)
        shift["probability"] = 1.0
        prof["population"] = [shift]
    profiles[STRESS_PROFILE] = prof
    scn = CompiledScenario(parse_scenario(doc, pack.scenario.file))
    return Pack(pack.path, scn, pack.rules, pack.reward_fns, pack.params, pack.calibration)


def _find_shift(profiles: Mapping[str, Any], name: str) -> Any:
    for p in profiles.values():
        for s in (p or {}).get("population") or []:
            if s.get("name") == name:
                return s
    return None


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

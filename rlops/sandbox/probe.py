"""Probing a pack's reward functions on edge states before anything trains on them.

One batch holds every probe: sampled initial states plus copies in which one field sits at an
edge (its min, its max, 0 for an unbounded number, every enum value, both bools), each paired
with every action (and with an illegal action, which the environment also scores). The
components run once on that batch — array ops, not a loop per state — and must return one
finite score per row. A component that raises, returns another shape, NaN or ±inf fails the
pack with its file, line and the probe that broke it.
"""

from __future__ import annotations

import torch

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.errors import PackError
from rlops.sandbox.reward import ColumnLayout, EnumColumn, RewardFunction, StateView, Transition
from rlops.sandbox.rng import StepRandom, column_weights, combine, seed_key, state_hash

Tensor = torch.Tensor

SAMPLED_STATES = 64


def _edge_values(scn: CompiledScenario) -> list[tuple[str, int, float]]:
    """(field path, column, value) for every edge a field can sit at."""
    out: list[tuple[str, int, float]] = []
    for f in scn.spec.fields:
        j = scn.columns[f.path]
        if f.type == "bool":
            vals = [0.0, 1.0]
        elif f.type == "enum":
            vals = [float(k) for k in range(len(f.values))]
        else:
            vals = [v for v in (f.min, f.max) if v is not None]
            if f.min is None or f.max is None:
                vals.append(0.0)  # an unbounded number reaches 0 sooner or later: the classic divisor
        out.extend((f.path, j, float(v)) for v in dict.fromkeys(vals))
    return out


def probe_states(scn: CompiledScenario, samples: int = SAMPLED_STATES) -> tuple[Tensor, list[str]]:
    """The probe states ``[M, C]`` and, per row, what makes it an edge ("" for a sampled one)."""
    keys = seed_key(torch.arange(samples, dtype=torch.int64), torch.zeros(samples, dtype=torch.int64))
    base = scn.sample_initial(keys, scn.spec.default_profile)
    edges = _edge_values(scn)
    rows = base[torch.arange(len(edges)) % samples].clone()
    if edges:
        rows[torch.arange(len(edges)), torch.tensor([j for _, j, _ in edges])] = torch.tensor([v for *_, v in edges])
    S = scn.clamp(torch.cat([base, rows]))
    m = S.shape[0]
    idx = torch.arange(m, dtype=torch.float32)
    # Episode variables vary too: late steps, repeated actions, elapsed time.
    S[:, scn.columns["episode.step"]] = idx % scn.spec.horizon
    S[:, scn.columns["episode.repeat_count"]] = idx % 4
    S[:, scn.columns["episode.last_action"]] = idx % (scn.n_actions + 1)
    S[:, scn.columns["episode.elapsed_ms"]] = idx * 250.0
    return S, [""] * samples + [f"{p} = {v:g}" for p, _, v in edges]


def probe_transitions(scn: CompiledScenario) -> tuple[Transition, Tensor, list[str]]:
    """Every probe state paired with every action code (``-1``: an illegal action)."""
    S0, why = probe_states(scn)
    m = S0.shape[0]
    codes = torch.arange(-1, scn.n_actions)
    acts = codes.repeat_interleave(m)
    S = S0.repeat(len(codes), 1)
    n = S.shape[0]
    legal = acts >= 0
    error = legal & (torch.arange(n) % 5 == 4)
    ok = legal & ~error
    key = combine(
        seed_key(torch.arange(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)),
        state_hash(S, column_weights(scn.n_cols)),
    )
    with torch.inference_mode():
        S_next = scn.clamp(scn.apply_effects(S, acts, ok, StepRandom(key, scn.step_draws)))
        c_step = scn.columns["episode.step"]
        S_next[:, c_step] = S[:, c_step] + 1
        lat = torch.tensor([a.latency_mean_ms for a in scn.spec.actions] + [0.0])[acts]
        terminated = scn.terminated(S_next, acts, ok)
    truncated = ~terminated & (S_next[:, c_step] >= scn.spec.horizon)
    layout = ColumnLayout(scn.columns, {p: (t.kind, t.values) for p, t in scn.types.items()})
    t = Transition(
        StateView(S.clone(), layout),
        StateView(S_next.clone(), layout),
        EnumColumn(acts.float(), scn.action_names, "action"),
        error,
        lat,
        terminated,
        truncated,
    )
    return t, acts, why * len(codes)


def probe_reward_fn(scn: CompiledScenario, fn: RewardFunction) -> None:
    """Run every component of ``fn`` on the probe batch; a :class:`PackError` on the first that
    raises, returns another shape or a non-finite score."""
    t, acts, why = probe_transitions(scn)
    n = acts.shape[0]
    names = ("an illegal action",) + tuple(f"action '{a}'" for a in scn.action_names)
    cols = []
    for c in fn.components:
        try:
            with torch.inference_mode():
                v = torch.as_tensor(c.fn(t), dtype=torch.float32)
        except Exception as exc:  # noqa: BLE001 - any failure of pack code is an authoring error
            raise PackError(
                fn.path,
                c.line,
                c.name,
                f"reward component raised {type(exc).__name__}: {exc} on the probe states (edge values of the fields)",
            ) from None
        if v.dim() == 0:
            v = v.expand(n)
        if v.shape != (n,):
            raise PackError(
                fn.path,
                c.line,
                c.name,
                f"reward component returned shape {tuple(v.shape)}, expected "
                "one score per episode (a tensor [N] or a scalar)",
            )
        bad = (~torch.isfinite(v)).nonzero().flatten()
        if bad.numel():
            i = int(bad[0])
            state = f" when {why[i]}" if why[i] else " on a sampled initial state"
            raise PackError(
                fn.path,
                c.line,
                c.name,
                f"reward component returned {v[i].item()} for {names[int(acts[i]) + 1]}{state} (scores must be finite)",
            )
        cols.append(v)
    w = torch.tensor(
        [
            max(abs(x) for x in [fn.weights_at(0)[c.objective]] + [ws.get(c.objective, 0.0) for _, ws in fn.schedule])
            for c in fn.components
        ]
    )
    if not bool(torch.isfinite((torch.stack(cols, dim=1).abs() * w).sum(dim=1)).all()):
        raise PackError(
            fn.path,
            None,
            "WEIGHTS",
            "the weighted reward total overflows to infinity on the probe states; scores or weights are too large",
        )

"""Promotion gates: the statistics that decide whether a candidate policy may replace the champion.

Pure functions over per-episode outcomes (``rlops.sandbox.policies.EvalResult``) and live A/B
traces (their tests: :mod:`~rlops.pipeline_steps.promotion.gate_stats`);
:mod:`rlops.pipeline_steps.promotion.evaluate` feeds them and acts on the verdict. Every gate is one row
of the gate table (:mod:`~rlops.pipeline_steps.promotion.gate_table` renders it) —
``gate, candidate, champion, threshold, passed, status, detail``; ``status``
is exactly one of :data:`GATE_STATES`, ``pass | fail | skipped`` (``skipped``: a gate that could not
be judged — it blocks nothing, and says so, never "pass"). Every surface (console, CLI, MLflow
descriptions, webhook log) reads a row's state through :func:`gate_state`.

* ``mean_return`` — a paired bootstrap of per-episode return differences (both policies ran
  the same seeded episodes): the lower bound of the two-sided ``confidence`` interval of the
  mean difference must exceed ``min_improvement`` × the champion's return scale (0: better;
  slightly negative: non-inferior). The scale is ``|champion's mean return|``, at least
  ``scale_floor`` × its per-episode standard deviation
  (:func:`~rlops.pipeline_steps.promotion.gate_stats.return_scale`): every margin on returns is a
  share of it, so one default fits a click rate and a credit return.
* ``completion_rate`` may drop by at most ``completion_epsilon`` (absolute);
  ``handling_ms`` may grow by at most ``handling_epsilon`` (a fraction of the champion's);
  ``human_takeover_rate`` may rise by at most ``takeover_epsilon`` — unless the pack declares an
  operational budget (``completion_min``, ``handling_max_ms``, ``takeover_max``): a candidate
  within it passes even where it moves away from the champion. A pack whose reward prices hand-overs
  and handling time, and whose best policy hands over or follows up where the rule engine never
  does, states there how far the business accepts it; without a budget the gate is pure
  non-regression. The mean-return and segment gates still demand that the candidate earns more;
  ``illegal_action_rate``
  must not exceed ``max_illegal_rate`` (0); ``latency_p99_ratio`` — the candidate's p99 decision
  time over the champion's, both measured interleaved in one process on the same observations
  (so machine load cancels out) — must stay under its bound (skipped against the rule engine).
* ``finite_returns`` — every return of both runs is a finite number (a reward function that
  yields NaN or inf blocks promotion).
* ``segment:<name>`` — in every segment with at least ``min_segment_episodes`` episodes, the
  mean paired difference must be at least ``-segment_tolerance`` × the champion's return scale; a
  smaller segment is shown ``skipped``, not ``pass``.
* ``ab:<metric>`` — live traffic: completion and takeover rates (one-sided two-proportion
  z-tests) and handling time (one-sided Welch t-test) of the challenger group against the
  control group; a gate fails when the challenger is worse with p < ``ab_alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

import numpy as np
import pandas as pd

from rlops.common.params_promotion import GateConfig  # the gate part of the typed evaluate: block
from rlops.pipeline_steps.promotion.gate_stats import paired_bootstrap, proportion_beyond, return_scale, welch_greater

GateState = Literal["pass", "fail", "skipped"]
PASS: Final = "pass"
FAIL: Final = "fail"
SKIPPED: Final = "skipped"
GATE_STATES: Final = (PASS, FAIL, SKIPPED)
#: Where a reader of a gate table learns what each row decides and what a skip means.
GATES_HELP: Final = "docs/promotion-evidence.md (How a promotion is judged)"


def gate_state(row: Mapping[str, Any]) -> GateState:
    """The state of one gate-table row (a :meth:`Gate.to_dict` or a row of ``gates.json``):
    ``pass | fail | skipped``. Rows written before the state was a column carry only ``passed``
    and a ``detail`` starting with ``skipped``; an upper-case ``FAIL`` of older tables reads ``fail``."""
    status = str(row.get("status") or "").strip().lower()
    if status in GATE_STATES:
        return status  # type: ignore[return-value]  # narrowed by the membership test
    if str(row.get("detail") or "").startswith("skipped"):
        return SKIPPED
    passed = row.get("passed")
    return PASS if passed is True or str(passed).lower() == "true" else FAIL


def failing_gates(rows: list[Mapping[str, Any]]) -> list[str]:
    """Names of the rows whose state is ``fail`` (skipped gates block nothing)."""
    return [str(r.get("gate")) for r in rows if gate_state(r) == FAIL]


@dataclass
class Gate:
    """One row of the gate table."""

    gate: str
    candidate: float | str | None
    champion: float | str | None
    threshold: str
    passed: bool
    detail: str = ""
    skipped: bool = False

    @property
    def status(self) -> GateState:
        return SKIPPED if self.skipped else (PASS if self.passed else FAIL)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("skipped")
        d["status"] = self.status
        for k in ("candidate", "champion"):
            if isinstance(d[k], float):
                d[k] = None if math.isnan(d[k]) else round(d[k], 6)
        return d


# --------------------------------------------------------------------------- sandbox gates
def latency_gate(cand_p99_ms: float, champ_p99_ms: float | None, cfg: GateConfig) -> Gate:
    """Candidate p99 over champion p99 (measured together); skipped without a champion network."""
    if champ_p99_ms is None or not champ_p99_ms > 0:
        return Gate(
            "latency_p99_ratio",
            cand_p99_ms,
            None,
            f"<= {cfg.latency_p99_ratio:g} x champion",
            True,
            "skipped: no champion network to time against (rule engine)",
            skipped=True,
        )
    ratio = cand_p99_ms / champ_p99_ms
    return Gate(
        "latency_p99_ratio",
        cand_p99_ms,
        champ_p99_ms,
        f"<= {cfg.latency_p99_ratio:g} x champion",
        bool(ratio <= cfg.latency_p99_ratio),
        f"ratio {ratio:.3f} (p99 ms, batch 1, interleaved)",
    )


def _or_budget(relative: str, budget: float | None, op: str) -> str:
    return relative if budget is None else f"{relative} or {op} {budget:g}"


def _within_budget(value: float, budget: float | None, op: str) -> bool:
    """``value`` inside the pack's operational ``budget`` (``op``: ``>=`` a floor, ``<=`` a
    ceiling); never without a budget."""
    return budget is not None and (value >= budget if op == ">=" else value <= budget)


def _relative_or_budget(
    name: str, cand: float, champ: float, relative_ok: bool, relative_words: str, budget: float | None, op: str
) -> Gate:
    """An operational gate: the candidate passes the relative test against the champion
    (``relative_ok``, its threshold worded ``relative_words``) or, where the pack declares one,
    stays within the absolute ``budget`` (``op`` ``budget``), and the detail says when only the
    budget let it pass."""
    within = _within_budget(cand, budget, op)
    return Gate(
        name,
        cand,
        champ,
        _or_budget(relative_words, budget, op),
        bool(relative_ok or within),
        "within the pack's operational budget" if within and not relative_ok else "",
    )


def completion_gate(cand: float, champ: float, cfg: GateConfig) -> Gate:
    """No more than ``completion_epsilon`` below the champion, or at least ``completion_min``."""
    eps = cfg.completion_epsilon
    return _relative_or_budget(
        "completion_rate", cand, champ, cand >= champ - eps, f">= champion - {eps:g}", cfg.completion_min, ">="
    )


def handling_gate(cand: float, champ: float, cfg: GateConfig) -> Gate:
    """No more than ``handling_epsilon`` longer than the champion, or at most ``handling_max_ms``."""
    factor = 1 + cfg.handling_epsilon
    return _relative_or_budget(
        "handling_ms", cand, champ, cand <= champ * factor, f"<= champion x {factor:g}", cfg.handling_max_ms, "<="
    )


def takeover_gate(cand: float, champ: float, cfg: GateConfig) -> Gate:
    """No more than ``takeover_epsilon`` above the champion, or at most ``takeover_max``."""
    eps = cfg.takeover_epsilon
    return _relative_or_budget(
        "human_takeover_rate", cand, champ, cand <= champ + eps, f"<= champion + {eps:g}", cfg.takeover_max, "<="
    )


def comparison_gates(
    cand: Any,
    champ: Any,
    cfg: GateConfig,
    segments: Mapping[str, np.ndarray],
    latency: tuple[float, float | None],
    seed: int = 0,
) -> list[Gate]:
    """Gates of a paired sandbox comparison (``cand``/``champ`` are ``EvalResult``s of the same
    seeded episodes; ``segments`` maps a segment name to a boolean mask over the episodes;
    ``latency`` is the candidate's and the champion's p99 in ms, the latter None for rules)."""
    rc, rb = cand.returns.double().numpy(), champ.returns.double().numpy()
    sc, sb = cand.summary(), champ.summary()
    mean, lo, hi = paired_bootstrap(rc - rb, cfg.bootstrap_samples, cfg.confidence, seed)
    pct = int(round(cfg.confidence * 100))
    scale = champion_scale(rb, cfg)
    least = cfg.min_improvement * scale
    gates = [
        Gate(
            "mean_return",
            sc["mean_return"],
            sb["mean_return"],
            f"CI{pct} low of mean diff > "
            + ("0" if cfg.min_improvement == 0 else f"{share_text(cfg.min_improvement)} of the champion's scale"),
            bool(lo > least),
            f"mean diff {mean:.4f}, CI{pct} [{lo:.4f}, {hi:.4f}]; line {least:.4g} (scale {scale:.4g})",
        ),
        Gate(
            "finite_returns",
            float(np.isfinite(rc).mean()),
            float(np.isfinite(rb).mean()),
            "all returns finite",
            bool(np.isfinite(rc).all() and np.isfinite(rb).all()),
            "NaN/inf returns: the reward function is broken" if not np.isfinite(rc).all() else "",
        ),
        completion_gate(sc["completion_rate"], sb["completion_rate"], cfg),
        handling_gate(sc["mean_handling_ms"], sb["mean_handling_ms"], cfg),
        takeover_gate(sc["human_takeover_rate"], sb["human_takeover_rate"], cfg),
        Gate(
            "illegal_action_rate",
            sc["illegal_action_rate"],
            sb["illegal_action_rate"],
            f"<= {cfg.max_illegal_rate:g}",
            sc["illegal_action_rate"] <= cfg.max_illegal_rate,
            f"{sc['illegal_actions']} illegal actions",
        ),
        latency_gate(latency[0], latency[1], cfg),
    ]
    gates.extend(segment_gates(rc, rb, segments, cfg, scale))
    return gates


def champion_scale(rb: np.ndarray, cfg: GateConfig) -> float:
    """:func:`return_scale` of the champion's returns in the paired evaluation."""
    sd = float(rb.std(ddof=1)) if len(rb) > 1 else float("nan")
    return return_scale(float(rb.mean()) if len(rb) else float("nan"), sd, cfg.scale_floor)


def share_text(share: float) -> str:
    """``0.15`` → ``15%``, as a threshold column says a share of a scale."""
    pct = share * 100
    return f"{round(pct)}%" if abs(pct - round(pct)) < 1e-9 else f"{pct:g}%"


def segment_gates(
    rc: np.ndarray, rb: np.ndarray, segments: Mapping[str, np.ndarray], cfg: GateConfig, scale: float | None = None
) -> list[Gate]:
    """Per segment (a boolean mask over the paired episodes), candidate − champion mean return
    ``>= -segment_tolerance × scale`` (the champion's return scale over all the episodes,
    :func:`champion_scale`, unless given); skipped below ``min_segment_episodes``."""
    scale = champion_scale(rb, cfg) if scale is None else scale
    margin = cfg.segment_tolerance * scale
    gates: list[Gate] = []
    for name, rows in segments.items():
        n = int(rows.sum())
        if n < cfg.min_segment_episodes:
            gates.append(
                Gate(
                    f"segment:{name}",
                    None,
                    None,
                    f"n >= {cfg.min_segment_episodes}",
                    True,
                    f"skipped: {n} episodes",
                    skipped=True,
                )
            )
            continue
        d = rc[rows] - rb[rows]
        diff = float(d.mean())
        gates.append(
            Gate(
                f"segment:{name}",
                float(rc[rows].mean()),
                float(rb[rows].mean()),
                f"mean diff >= -{share_text(cfg.segment_tolerance)} of the champion's scale",
                bool(np.isfinite(diff) and diff >= -margin),
                f"{n} episodes, mean diff {diff:.4f}, line {-margin:.4g} (scale {scale:.4g})",
            )
        )
    return gates


def stress_gate(tags: Mapping[str, str], cfg: GateConfig) -> Gate:
    """The candidate's latest stress-test verdict (model version tag ``stress_test``)."""
    value = tags.get("stress_test")
    if value is None and not cfg.require_stress_test:
        return Gate(
            "stress_test",
            "missing",
            None,
            "verdict pass (not required)",
            True,
            "skipped: no stress test recorded (evaluate.require_stress_test is off)",
            skipped=True,
        )
    return Gate(
        "stress_test",
        value or "missing",
        None,
        "pass",
        value == "pass",
        "" if value else "no stress test recorded for this version (run `rlops stress`)",
    )


# --------------------------------------------------------------------------- live A/B gates
def episode_outcomes(traces: pd.DataFrame, takeover_actions: set[str]) -> pd.DataFrame:
    """One row per episode: ``completed``, ``takeover``, ``handling_ms``."""
    t = traces
    done = t["done"].fillna(False).astype(bool)
    ended = done & (t["terminated"].fillna(True).astype(bool) if "terminated" in t else True)
    g = pd.DataFrame(
        {
            "episode_id": t["episode_id"],
            "ended": ended,
            "takeover": t["action"].isin(takeover_actions),
            "latency": pd.to_numeric(t.get("latency_ms"), errors="coerce").fillna(0.0) if "latency_ms" in t else 0.0,
        }
    ).groupby("episode_id", sort=False)
    out = pd.DataFrame({"ended": g["ended"].any(), "takeover": g["takeover"].any(), "handling_ms": g["latency"].sum()})
    out["completed"] = out["ended"] & ~out["takeover"]
    return out


def ab_gates(challenger: pd.DataFrame, control: pd.DataFrame, cfg: GateConfig) -> list[Gate]:
    """Live A/B gates from per-episode outcomes of the two groups (:func:`episode_outcomes`): the
    challenger fails a gate where it is worse than the control by more than the sandbox gate's
    margin (``completion_epsilon``, ``takeover_epsilon``, ``handling_epsilon``) at p < ``ab_alpha``."""
    n1, n2 = len(challenger), len(control)
    if min(n1, n2) < cfg.ab_min_episodes:
        return [
            Gate(
                "ab:live_traffic",
                float(n1),
                float(n2),
                f"n >= {cfg.ab_min_episodes} per group",
                True,
                "skipped: not enough live episodes in a group",
                skipped=True,
            )
        ]
    gates = []
    # The sandbox's margins, tested live: a challenger fails only where it is worse than the control
    # by more than the margin its sandbox gate allowed (a significant 1 % slower challenger that the
    # sandbox passed at 5 % is not refused live). The pack's operational budget still admits one
    # that is worse but within it.
    for name, col, worse_if_higher, margin, budget in (
        ("completion_rate", "completed", False, cfg.completion_epsilon, cfg.completion_min),
        ("human_takeover_rate", "takeover", True, cfg.takeover_epsilon, cfg.takeover_max),
    ):
        x1, x2 = int(challenger[col].sum()), int(control[col].sum())
        if worse_if_higher:  # worse: the challenger's rate above the control's by more than the margin
            z, p_worse = proportion_beyond(x1, n1, x2, n2, margin)
            relative = f"not above control + {margin:g} at p < {cfg.ab_alpha:g}"
        else:  # worse: the control's rate above the challenger's by more than the margin
            z, p_worse = proportion_beyond(x2, n2, x1, n1, margin)
            relative = f"not below control − {margin:g} at p < {cfg.ab_alpha:g}"
        op = "<=" if worse_if_higher else ">="
        within = _within_budget(x1 / n1, budget, op)
        gates.append(
            Gate(
                f"ab:{name}",
                x1 / n1,
                x2 / n2,
                _or_budget(relative, budget, op),
                bool(not (p_worse < cfg.ab_alpha) or within),
                f"z={z:.3f}, one-sided p={p_worse:.4g}, n={n1}/{n2}",
            )
        )
    factor = 1.0 + cfg.handling_epsilon
    handling = float(challenger["handling_ms"].mean())
    t, p = welch_greater(challenger["handling_ms"].to_numpy(float), factor * control["handling_ms"].to_numpy(float))
    within = _within_budget(handling, cfg.handling_max_ms, "<=")
    gates.append(
        Gate(
            "ab:handling_ms",
            handling,
            float(control["handling_ms"].mean()),
            _or_budget(f"not above control x {factor:g} at p < {cfg.ab_alpha:g}", cfg.handling_max_ms, "<="),
            bool(not (p < cfg.ab_alpha) or within),
            f"Welch t={t:.3f} against control x {factor:g}, one-sided p={p:.4g}",
        )
    )
    return gates


__all__ = [
    "FAIL",
    "GATE_STATES",
    "Gate",
    "GateConfig",
    "GateState",
    "PASS",
    "SKIPPED",
    "failing_gates",
    "gate_state",
    "ab_gates",
    "comparison_gates",
    "completion_gate",
    "handling_gate",
    "latency_gate",
    "takeover_gate",
    "episode_outcomes",
    "stress_gate",
]

"""Promotion gates: the statistics that decide whether a candidate policy may replace the champion.

Pure functions over per-episode outcomes (``rlops.sandbox.policies.EvalResult``) and live A/B
traces; :mod:`rlops.pipeline_steps.promotion.evaluate` feeds them and acts on the verdict. Every gate is one row
of the gate table — ``gate, candidate, champion, threshold, passed, status, detail``; ``status``
is exactly one of :data:`GATE_STATES`, ``pass | fail | skipped`` (``skipped``: a gate that could not
be judged — it blocks nothing, and says so, never "pass"). Every surface (console, CLI, MLflow
descriptions, webhook log) reads a row's state through :func:`gate_state`.

* ``mean_return`` — a paired bootstrap of per-episode return differences (both policies ran
  the same seeded episodes): the lower bound of the two-sided ``confidence`` interval of the
  mean difference must exceed ``min_improvement`` × the champion's return scale (0: better;
  slightly negative: non-inferior). The scale is ``|champion's mean return|``, at least
  ``scale_floor`` × its per-episode standard deviation (:func:`return_scale`): every margin on
  returns is a share of it, so one default fits a click rate and a credit return.
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

import html
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

import numpy as np
import pandas as pd

from rlops.common.params_promotion import GateConfig  # the gate part of the typed evaluate: block

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


# --------------------------------------------------------------------------- statistics
def paired_bootstrap(
    diffs: np.ndarray, samples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of ``diffs`` and the percentile bootstrap interval ``(low, high)`` of the mean.
    Any non-finite difference makes all three NaN (no interval can be trusted)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0 or not np.isfinite(d).all():
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    chunk = max(1, 4_000_000 // d.size)  # bound memory: ``chunk × n`` indices at a time
    for start in range(0, samples, chunk):
        k = min(chunk, samples - start)
        means[start : start + k] = d[rng.integers(0, d.size, size=(k, d.size))].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(d.mean()), float(lo), float(hi)


def two_proportion_z(x1: int, n1: int, x2: int, n2: int) -> tuple[float, float]:
    """z statistic of ``p1 - p2`` (pooled) and the one-sided p-value of ``p1 > p2``."""
    from scipy.stats import norm

    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    p = (x1 + x2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:  # pooled rate 0 or 1: both groups identical
        return 0.0, 0.5
    z = (x1 / n1 - x2 / n2) / se
    return float(z), float(norm.sf(z))


def welch_greater(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Welch t statistic of ``mean(a) - mean(b)`` and the one-sided p-value of ``mean(a) > mean(b)``."""
    from scipy.stats import ttest_ind

    if len(a) < 2 or len(b) < 2:
        return float("nan"), float("nan")
    res = ttest_ind(a, b, equal_var=False, alternative="greater")
    return float(res.statistic), float(res.pvalue)


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


def completion_gate(cand: float, champ: float, cfg: GateConfig) -> Gate:
    """No more than ``completion_epsilon`` below the champion, or at least ``completion_min``."""
    within = cfg.completion_min is not None and cand >= cfg.completion_min
    relative = cand >= champ - cfg.completion_epsilon
    return Gate(
        "completion_rate",
        cand,
        champ,
        _or_budget(f">= champion - {cfg.completion_epsilon:g}", cfg.completion_min, ">="),
        bool(relative or within),
        "within the pack's operational budget" if within and not relative else "",
    )


def handling_gate(cand: float, champ: float, cfg: GateConfig) -> Gate:
    """No more than ``handling_epsilon`` longer than the champion, or at most ``handling_max_ms``."""
    within = cfg.handling_max_ms is not None and cand <= cfg.handling_max_ms
    relative = cand <= champ * (1 + cfg.handling_epsilon)
    return Gate(
        "handling_ms",
        cand,
        champ,
        _or_budget(f"<= champion x {1 + cfg.handling_epsilon:g}", cfg.handling_max_ms, "<="),
        bool(relative or within),
        "within the pack's operational budget" if within and not relative else "",
    )


def takeover_gate(cand: float, champ: float, cfg: GateConfig) -> Gate:
    """No more than ``takeover_epsilon`` above the champion, or at most ``takeover_max``."""
    within = cfg.takeover_max is not None and cand <= cfg.takeover_max
    relative = cand <= champ + cfg.takeover_epsilon
    return Gate(
        "human_takeover_rate",
        cand,
        champ,
        _or_budget(f"<= champion + {cfg.takeover_epsilon:g}", cfg.takeover_max, "<="),
        bool(relative or within),
        "within the pack's operational budget" if within and not relative else "",
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


def return_scale(mean: float, sd: float, floor: float) -> float:
    """The scale a margin on returns is a share of: ``|mean|``, but at least ``floor`` × the
    per-episode return's standard deviation, so that a value near zero does not make every margin
    vanish (NaN when ``mean`` is not finite). The same defaults then judge a credit return (≈ 0.3)
    and a click rate (≈ 0.005) alike."""
    if not math.isfinite(mean):
        return float("nan")
    return max(abs(mean), floor * sd if math.isfinite(sd) else 0.0)


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
    """Live A/B gates from per-episode outcomes of the two groups (:func:`episode_outcomes`)."""
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
    # The pack's operational budget (GateConfig) admits a challenger that is worse but within it.
    for name, col, worse_if_higher, budget in (
        ("completion_rate", "completed", False, cfg.completion_min),
        ("human_takeover_rate", "takeover", True, cfg.takeover_max),
    ):
        x1, x2 = int(challenger[col].sum()), int(control[col].sum())
        z, p_greater = two_proportion_z(x1, n1, x2, n2)
        p_worse = p_greater if worse_if_higher else (1.0 - p_greater if np.isfinite(p_greater) else p_greater)
        within = budget is not None and (x1 / n1 <= budget if worse_if_higher else x1 / n1 >= budget)
        gates.append(
            Gate(
                f"ab:{name}",
                x1 / n1,
                x2 / n2,
                _or_budget(f"not worse at p < {cfg.ab_alpha:g}", budget, "<=" if worse_if_higher else ">="),
                bool(not (p_worse < cfg.ab_alpha) or within),
                f"z={z:.3f}, one-sided p={p_worse:.4g}, n={n1}/{n2}",
            )
        )
    handling = float(challenger["handling_ms"].mean())
    t, p = welch_greater(challenger["handling_ms"].to_numpy(float), control["handling_ms"].to_numpy(float))
    within = cfg.handling_max_ms is not None and handling <= cfg.handling_max_ms
    gates.append(
        Gate(
            "ab:handling_ms",
            handling,
            float(control["handling_ms"].mean()),
            _or_budget(f"not longer at p < {cfg.ab_alpha:g}", cfg.handling_max_ms, "<="),
            bool(not (p < cfg.ab_alpha) or within),
            f"Welch t={t:.3f}, one-sided p={p:.4g}",
        )
    )
    return gates


# --------------------------------------------------------------------------- rendering
def gate_frame(gates: list[Gate]) -> pd.DataFrame:
    return pd.DataFrame(
        [g.to_dict() for g in gates],
        columns=["gate", "candidate", "champion", "threshold", "passed", "status", "detail"],
    )


def gate_table_html(gates: list[Gate], title: str, facts: Mapping[str, Any]) -> str:
    """A standalone HTML page: the facts of the comparison and the gate table."""
    rows = []
    for g in gates:
        d = g.to_dict()
        color = "#eeeeee" if g.skipped else ("#e6f4ea" if g.passed else "#fce8e6")
        cells = "".join(
            f"<td>{html.escape('' if d[k] is None else str(d[k]))}</td>"
            for k in ("gate", "candidate", "champion", "threshold")
        )
        rows.append(f"<tr style='background:{color}'>{cells}<td>{g.status}</td><td>{html.escape(g.detail)}</td></tr>")
    info = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in facts.items())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}td,th{padding:4px 8px;border:1px solid #ccc}"
        "table{border-collapse:collapse}</style></head>"
        f"<body><h1>{html.escape(title)}</h1><ul>{info}</ul><table><tr><th>gate</th><th>candidate</th>"
        "<th>champion</th><th>threshold</th><th>result</th><th>detail</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )


def with_gate_summary(description: str, report: dict[str, Any]) -> str:
    """The version description with its ``Gates:`` paragraph replaced by this evaluation's verdict:
    one line per gate, its state exactly ``pass``, ``fail`` or ``skipped`` (with why it was skipped)."""
    head = re.split(r"(?:^|\n\n)Gates[ :(]", description, maxsplit=1)[0].rstrip()
    failed = failing_gates(report["gates"]) if report.get("gates") else list(report["failed_gates"])
    skipped = [g["gate"] for g in report["gates"] if gate_state(g) == SKIPPED]
    verdict = "all passed" if not failed else f"FAILED {', '.join(failed)}"
    if skipped:
        verdict += f" ({len(skipped)} skipped: {', '.join(skipped)})"
    lines = [
        f"Gates ({report['run_key']}, vs {report['baseline']}, {report['episodes']} episodes, "
        f"{report['profile']} profile): {verdict}."
    ]
    for g in report["gates"]:
        state = gate_state(g)
        why = str(g.get("detail") or "") if state == SKIPPED else ""
        lines.append(f"- {g['gate']}: {state} ({g['threshold']}{'; ' + why if why else ''})")
    return (head + "\n\n" if head else "") + "\n".join(lines)


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
    "gate_frame",
    "gate_table_html",
    "paired_bootstrap",
    "stress_gate",
    "two_proportion_z",
    "welch_greater",
    "with_gate_summary",
]

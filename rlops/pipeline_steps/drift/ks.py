"""The two-sample Kolmogorov–Smirnov test as ``scipy.stats.ks_2samp(method='auto')`` computes it.

The statistic is the same float, bit for bit; the p-value comes from scipy's distribution code,
except in one slow case (:func:`_kstwo_sf`) where the same series is summed in extended
precision, a few ulps from scipy's value.

:func:`ks_statistic_unsorted` finds the statistic without sorting the samples: sorting is
the whole cost of ``ks_2samp`` on large windows (about 50 ns a value here), while counting the
values into a fine grid of buckets is a few ns a value. The ECDF difference at the end of every
bucket is then exact, and inside a bucket it can move only by that bucket's counts; only the
few buckets whose bound reaches the best difference seen are sorted and searched in full.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import cache
from typing import NamedTuple

import numpy as np
import scipy.stats

from rlops.pipeline_steps.drift.ks_kernels import (
    anchored_sum,
    bucket_counts,
    buckets_of,
    gap_bounds,
    values_in_buckets,
)

try:  # scipy's exact small-sample p-value from (n1, n2, D); public ks_2samp is the fallback
    from scipy.stats._stats_py import _attempt_exact_2kssamp
except ImportError:  # pragma: no cover - depends on the scipy release
    _attempt_exact_2kssamp = None
HAS_EXACT = _attempt_exact_2kssamp is not None  # else small samples go to ks_2samp itself

MAX_EXACT_N = 10_000  # scipy's MAX_AUTO_N: 'auto' is exact when both samples are this small
_BLOCK = 64  # block size of the bound-and-refine search for the ECDF gap of sorted samples
_GRID = (1 << 16) - 2  # buckets of the counting pass, plus one below and one above: a uint16 each
_SORT_BELOW = 1 << 14  # pooled size under which sorting both samples is cheaper than counting
_GRID_SAMPLE = 4096  # values a side that place the grid
_GRID_TAIL = 1 / 1024  # the grid spans these sample quantiles; the tails get the end buckets
_FAST_SMIRNOV_MIN_N = 4096
_SMIRNOV_MAX_COMPUTE_N = 1_000_000  # above this scipy uses a closed-form approximation
_ANCHOR_EVERY = 16  # Smirnov terms computed in long double; the others by ratios from them
_ANCHORS_PER_CHUNK = 2048  # anchors whose ratios are worked out together (32k terms)
# the fast Smirnov sum needs x87 80-bit long double (64-bit mantissa); elsewhere scipy sums
_HAS_X87_LONG_DOUBLE = np.finfo(np.longdouble).nmant == 63


# --------------------------------------------------------------------------- KS statistic
def _max_ecdf_gap(a: np.ndarray, b: np.ndarray) -> float:
    """``max_i F_a(a_i) - F_b(a_i)`` for sorted ``a``, ``b``, as the float scipy computes.

    scipy evaluates ``cdf1 - cdf2`` at every pooled point; the maximum of that difference can
    only be reached where ``F_a`` jumps, i.e. at points of ``a``, and the minimum at points of
    ``b`` (call this with the arguments swapped). At ``a_i`` we use ``(i+1)/n_a``, which is below
    the true ECDF inside a run of ties and so never wins. Rather than search all of ``a`` in
    ``b``, search block starts only: inside a block of ``_BLOCK`` points the difference is at
    most ``end/n_a - F_b(start)``; only blocks whose bound reaches the best value seen are
    searched in full. Every value compared is the same float expression scipy uses.
    """
    na, nb = a.size, b.size
    if na <= 8 * _BLOCK:
        idx = np.arange(na)
    else:
        starts = np.arange(0, na, _BLOCK)
        cb = np.searchsorted(b, a[starts], side="right")
        best = np.max((starts + 1) / na - cb / nb)
        upper = np.minimum(starts + _BLOCK, na) / na - cb / nb
        cand = starts[upper >= best - 1e-9]  # > float error; a wider margin only adds blocks
        idx = (cand[:, None] + np.arange(_BLOCK)).ravel()
        idx = idx[idx < na]
    return float(np.max((idx + 1) / na - np.searchsorted(b, a[idx], side="right") / nb))


def ks_statistic(sorted_a: np.ndarray, sorted_b: np.ndarray) -> float:
    """Two-sided KS statistic of two sorted, NaN-free samples (before scipy's exact-mode
    rounding to a multiple of 1/lcm(n1, n2), which :func:`ks_pvalue` applies)."""
    max_s = max(_max_ecdf_gap(sorted_a, sorted_b), 0.0)
    min_s = max(_max_ecdf_gap(sorted_b, sorted_a), 0.0)
    return min_s if min_s > max_s else max_s


def _grid(a: np.ndarray, b: np.ndarray) -> tuple[float, float] | None:
    """``(lo, scale)`` of the bucket grid, from a strided sample of both sides: the grid spans
    the sample's inner quantiles, so a few outliers do not squeeze the bulk into one bucket.
    None when the sample has no spread (then sorting is the way)."""
    sample = np.concatenate([a[:: max(1, a.size // _GRID_SAMPLE)], b[:: max(1, b.size // _GRID_SAMPLE)]])
    sample = np.sort(sample[np.isfinite(sample)].astype(np.float64))
    if sample.size < 2:
        return None
    tail = int(sample.size * _GRID_TAIL)
    lo, hi = float(sample[tail]), float(sample[-tail - 1])
    if not hi > lo:
        lo, hi = float(sample[0]), float(sample[-1])
    if not hi > lo:
        return None
    scale = _GRID / (hi - lo)
    if not 0.0 < scale < math.inf:  # a span that overflows, or one too narrow to divide
        return None
    return lo - 1.0 / scale, scale  # values at lo land in bucket 1; bucket 0 holds the low tail


class SampleStatistic(NamedTuple):
    """The two-sample KS statistic and how many values of each sample it counts (NaN left out)."""

    statistic: float
    n_a: int
    n_b: int


def _no_nan(values: np.ndarray) -> np.ndarray:
    """``values`` without its NaN (missing) values."""
    if values.dtype.kind != "f" or not values.size or not np.isnan(values.min()):
        return values  # min is NaN exactly when a value is: one pass, no mask array
    kept: np.ndarray = values[~np.isnan(values)]
    return kept


def ks_statistic_unsorted(a: np.ndarray, b: np.ndarray) -> SampleStatistic:
    """:func:`ks_statistic` of the non-NaN values of two samples in any order, without sorting
    them, and the sizes of the samples it compares (the statistic is NaN when one is empty).

    Count both samples into the buckets of :mod:`~rlops.pipeline_steps.drift.ks_kernels`; with
    ``A[k]``, ``B[k]`` the counts below bucket ``k``, every point of bucket ``k`` has ``F_a - F_b``
    between ``A[k]/n_a - B[k+1]/n_b`` and ``A[k+1]/n_a - B[k]/n_b``, and the last pooled point of a
    bucket has exactly ``A[k+1]/n_a - B[k+1]/n_b``. The largest of those exact values is a
    floor for the maximum; only buckets whose bound reaches it can hold a larger value, and
    only their values are sorted and compared, with counts offset by the buckets below. Every
    value compared is the float expression scipy computes (counts divided by sizes, then
    subtracted), so the result is scipy's statistic bit for bit.
    """
    grid = None if a.size + b.size < _SORT_BELOW else _grid(a, b)
    if grid is None:
        a, b = _no_nan(a), _no_nan(b)
        if a.size == 0 or b.size == 0:
            return SampleStatistic(math.nan, a.size, b.size)
        return SampleStatistic(ks_statistic(np.sort(a), np.sort(b)), a.size, b.size)
    lo, scale = grid
    where_a, where_b = np.empty(a.size, np.uint16), np.empty(b.size, np.uint16)
    count_a, nan_a = bucket_counts(a, lo, scale, _GRID, where_a)
    count_b, nan_b = bucket_counts(b, lo, scale, _GRID, where_b)
    na, nb = a.size - nan_a, b.size - nan_b
    if na == 0 or nb == 0:
        return SampleStatistic(math.nan, na, nb)
    below_a, below_b, best_max, best_min, open_max, open_min = gap_bounds(count_a, count_b, na, nb)
    refine = open_max | open_min
    if refine.any():
        ca = np.sort(values_in_buckets(a, where_a, refine, int(count_a[refine].sum())))
        cb = np.sort(values_in_buckets(b, where_b, refine, int(count_b[refine].sum())))
        ka, kb = buckets_of(ca, lo, scale, _GRID), buckets_of(cb, lo, scale, _GRID)
        best_max = _refined_gap(ca, ka, cb, kb, open_max, below_a, below_b, na, nb, best_max)
        best_min = _refined_gap(cb, kb, ca, ka, open_min, below_b, below_a, nb, na, best_min)
    return SampleStatistic(best_min if best_min > best_max else best_max, na, nb)


def _refined_gap(
    x: np.ndarray,
    kx: np.ndarray,
    y: np.ndarray,
    ky: np.ndarray,
    open_: np.ndarray,
    below_x: np.ndarray,
    below_y: np.ndarray,
    nx: int,
    ny: int,
    best: float,
) -> float:
    """``max(best, F_x(x_i) - F_y(x_i))`` over the refined values ``x_i`` in the open buckets.

    ``x``, ``y``: the refined values of each side, sorted (so in bucket order too), ``kx``,
    ``ky`` their buckets; ``below_*[k]`` the values of each side below bucket ``k``. The rank of
    ``x_i`` in the whole sample is the values below its bucket that were not refined, plus its
    rank among the refined values; as in :func:`_max_ecdf_gap`, ``(rank+1)/n_x`` is below the
    true ECDF inside a run of ties and never wins.
    """
    pick = np.flatnonzero(open_[kx])
    if pick.size == 0:
        return best
    k = kx[pick]
    rank_x = below_x[k] - np.searchsorted(kx, k, side="left") + pick
    count_y = below_y[k] - np.searchsorted(ky, k, side="left") + np.searchsorted(y, x[pick], side="right")
    return max(best, float(np.max((rank_x + 1) / nx - count_y / ny)))


# --------------------------------------------------------------------------- KS p-value
def ks_pvalue(d: float, n1: int, n2: int) -> tuple[float, float, str]:
    """``(statistic, p_value, method)`` as ``ks_2samp(method='auto')`` reports them."""
    if max(n1, n2) <= MAX_EXACT_N:
        if _attempt_exact_2kssamp is None:  # pragma: no cover - another scipy layout
            raise RuntimeError("this scipy has no _attempt_exact_2kssamp; use ks_2samp itself")
        ok, d, prob = _attempt_exact_2kssamp(n1, n2, math.gcd(n1, n2), d, "two-sided")
        if ok:  # else, like scipy, the asymptotic p-value of the rounded statistic
            return float(d), float(np.clip(prob, 0.0, 1.0)), "exact"
    m, n = sorted([float(n1), float(n2)], reverse=True)
    prob = _kstwo_sf(float(d), float(np.round(m * n / (m + n))))
    return float(d), float(np.clip(prob, 0.0, 1.0)), "asymp"


def _kstwo_sf(d: float, n_eff: float) -> float:
    """``scipy.stats.kstwo.sf(d, n_eff)``.

    scipy evaluates it as ``2 * scipy.special.smirnov(n, d)`` when ``2.2 <= n d² < 370``, and
    that sums ``n(1-d)`` double-double terms one by one: about 0.4 s at n = 500 000, more
    than sorting and comparing a million rows. There the same sum is taken vectorised in
    extended precision (:func:`_smirnov_sf`); every other case goes to scipy itself.
    """
    n = int(n_eff)
    if _HAS_X87_LONG_DOUBLE and _FAST_SMIRNOV_MIN_N <= n <= _SMIRNOV_MAX_COMPUTE_N and 0.0 < d < 0.5:
        t = n * d
        if 1.0 < t < n - 1 and 2.2 <= t * d < 370.0:  # scipy's own branch conditions
            return min(2.0 * _smirnov_sf(n, d), 1.0)
    return float(scipy.stats.kstwo.sf(d, n_eff))


_STIRLING = (1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188, 691 / 360360)


@cache
def _stirlerr_table() -> np.ndarray:
    """``log k! - (k+1/2) log k + k - log(2π)/2`` for k < 64, from 50-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = 50
        half_log_2pi = (2 * Decimal("3.14159265358979323846264338327950288419716939937510")).ln() / 2
        out, fact = [0.0], Decimal(1)
        for k in range(1, 64):
            fact *= k
            dk = Decimal(k)
            out.append(float(fact.ln() - (dk + Decimal("0.5")) * dk.ln() + dk - half_log_2pi))
    return np.array(out)


def _stirlerr(k: np.ndarray) -> np.ndarray:
    """Stirling's error term for integer-valued float ``k >= 1`` (series for k >= 64)."""
    r, s = 1.0 / k, _STIRLING  # one division: the series in 1/k² by products (each term ~1e-17 of 1/12k)
    r2 = r * r
    out = (s[0] - (s[1] - (s[2] - (s[3] - (s[4] - s[5] * r2) * r2) * r2) * r2) * r2) * r
    small = k < 64
    if small.any():
        out[small] = _stirlerr_table()[k[small].astype(np.int64)]
    result: np.ndarray = out
    return result


def _smirnov_sf(n: int, x: float) -> float:
    """One-sided Smirnov ``P(D+_n >= x)``: ``sum_v C(n,v) x (x+v/n)^(v-1) (1-x-v/n)^(n-v)``.

    Every ``_ANCHOR_EVERY``-th term is written as a binomial probability in Loader's saddle-point
    form, ``exp(stirlerr(n) - stirlerr(v) - stirlerr(n-v) - bd0(v, n p) - bd0(n-v, n q))`` times a
    smooth factor, with the deviance (all the cancellation) in long double. The terms between
    two anchors follow by the ratio of consecutive terms (:func:`_term_ratios`), whose exponent
    is of order one, so float64 gives each ratio to a few ulps and a run of 15 of them stays
    within about 1e-15 of the true term. x87 log1p costs 40 times the float64 one: the anchors
    make the long-double work a sixteenth of a sum of every term, and the float64 result stays
    within a few ulps of scipy's double-double sum (tests: at most 8 on the fast-path grid).
    """
    ld = np.longdouble
    n_below = n - math.floor(Fraction(x) * n) - 1  # last v with 1 - x - v/n > 0
    log_t0 = ld(n) * np.log1p(-ld(x))  # the v = 0 term, (1-x)^n
    if n_below < 1:
        return float(np.exp(log_t0))
    nx_f = n * x
    a = np.arange(1.0, n_below + 1.0, _ANCHOR_EVERY)
    na = n - a
    nx = ld(n) * ld(x)
    al, nal = a.astype(ld), na.astype(ld)
    deviance = nal * np.log1p(nx / (nal - nx)) - al * np.log1p(nx / al)
    log_a = (_stirlerr(np.array([float(n)]))[0] - _stirlerr(a) - _stirlerr(na)) - deviance
    top = max(log_a.max(), log_t0)
    rel = log_a - top
    rel_hi = rel.astype(np.float64)
    rel_lo = (rel - rel_hi).astype(np.float64)
    anchor = np.exp(rel_hi) * (1.0 + rel_lo) * (nx_f / (nx_f + a)) * np.sqrt(n / (2.0 * np.pi * a * na))
    total = np.exp(log_t0 - top)
    # a few thousand anchors at a time: the ratios' work arrays stay in the CPU cache and are
    # reused, where the whole series' (~20 of n/2 values each) cost as much in page faults as in math
    for start in range(0, a.size, _ANCHORS_PER_CHUNK):
        part = slice(start, start + _ANCHORS_PER_CHUNK)
        hi, lo = anchored_sum(_term_ratios(a[part], n, nx_f, n_below), anchor[part])
        total += ld(hi) + ld(lo)
    return float(total * np.exp(top))


def _term_ratios(a: np.ndarray, n: int, nx: float, last: int) -> np.ndarray:
    """``[1, t(a+1)/t(a), …]``, ``_ANCHOR_EVERY`` columns for each anchor ``a`` (0 past ``last``).

    ``t(u+1)/t(u) = (n-u)/(u+1) · (nx+u+1)/(n-nx-u) · exp((u-1) log1p(1/(nx+u)) + (n-u-1)
    log1p(-1/(n-nx-u)))``: both products in the exponent are below about 1 in size.
    """
    u: np.ndarray = np.add.outer(a, np.arange(-1.0, _ANCHOR_EVERY - 1.0))  # column j: t(a+j)/t(a+j-1)
    # Past the last term, and at a last term whose (1-x-v/n) is below float resolution (nx
    # rounded up to an integer): the true ratio is under ~1e-12, nothing against the sum.
    past = (u + 1.0 > last) | (n - nx - u <= 1.0)
    u[past] = 1.0  # any valid term; zeroed below
    out: np.ndarray = np.log1p(1.0 / (nx + u))
    out *= u - 1.0
    q = n - nx - u
    tail = np.log1p(-1.0 / q)
    tail *= n - u - 1.0
    out += tail
    np.exp(out, out=out)
    out *= (n - u) / (u + 1.0)
    out *= (nx + u + 1.0) / q
    out[past] = 0.0
    out[:, 0] = 1.0
    return out

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
import threading
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import cache

import numpy as np
import scipy.stats

try:  # scipy's exact small-sample p-value from (n1, n2, D); public ks_2samp is the fallback
    from scipy.stats._stats_py import _attempt_exact_2kssamp
except ImportError:  # pragma: no cover - depends on the scipy release
    _attempt_exact_2kssamp = None
HAS_EXACT = _attempt_exact_2kssamp is not None  # else small samples go to ks_2samp itself

MAX_EXACT_N = 10_000  # scipy's MAX_AUTO_N: 'auto' is exact when both samples are this small
_BLOCK = 64  # block size of the bound-and-refine search for the ECDF gap of sorted samples
_GRID = 1 << 16  # buckets of the counting pass (plus one below and one above the grid)
_CHUNK = 1 << 17  # values per chunk of the counting pass: its work arrays fit the CPU's cache
_SORT_BELOW = 1 << 14  # pooled size under which sorting both samples is cheaper than counting
_GRID_SAMPLE = 4096  # values a side that place the grid
_GRID_TAIL = 1 / 1024  # the grid spans these sample quantiles; the tails get the end buckets
_FAST_SMIRNOV_MIN_N = 4096
_SMIRNOV_MAX_COMPUTE_N = 1_000_000  # above this scipy uses a closed-form approximation
_ANCHOR_EVERY = 16  # Smirnov terms computed in long double; the others by ratios from them
_ANCHORS_PER_CHUNK = 2048  # anchors whose ratios are worked out together (32k terms)
# the fast Smirnov sum needs x87 80-bit long double (64-bit mantissa); elsewhere scipy sums
_HAS_X87_LONG_DOUBLE = np.finfo(np.longdouble).nmant == 63


class Scratch(threading.local):
    """Work arrays of the counting pass, one set a thread, kept between fields: a fresh array
    of a million values costs as much in page faults as the arithmetic on it."""

    def __init__(self) -> None:
        self.floats = np.empty(0)
        self.ints = (np.empty(0, np.int32), np.empty(0, np.int32))

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.floats.size < n:
            self.floats = np.empty(n)
            self.ints = (np.empty(n, np.int32), np.empty(n, np.int32))
        return self.floats, self.ints[0], self.ints[1]


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


def _buckets(x: np.ndarray, lo: float, scale: float, work: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Bucket of every value: ``trunc(clip(float32(x - lo) * scale, 0, GRID + 1))``. Each step
    is monotone (IEEE rounding is, float64 to float32 included), so ``x <= y`` implies
    ``bucket(x) <= bucket(y)``: a lower bucket holds only smaller values, whatever the rounding.
    float32 (a 24-bit mantissa is ample for 2^16 buckets) halves the memory traffic after the
    first pass. ±inf and values beyond float32 land in the end buckets."""
    y, idx = work.view(np.float32)[: x.size], out[: x.size]
    with np.errstate(over="ignore"):  # beyond float32: inf, the top bucket, as intended
        np.subtract(x, lo, out=y, casting="same_kind")
    np.multiply(y, np.float32(scale), out=y)
    np.clip(y, np.float32(0.0), np.float32(_GRID + 1.0), out=y)
    idx[...] = y  # truncation toward zero, of values >= 0
    return idx


def _bucket_counts(
    x: np.ndarray, lo: float, scale: float, work: np.ndarray, out: np.ndarray, n_buckets: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts per bucket, bucket of every value)``, as :func:`_buckets` then ``bincount``, in
    chunks of :data:`_CHUNK` values: each chunk's passes (subtract, scale, clip, truncate, count)
    run on data still in the CPU cache, where whole columns would go to memory and back five times."""
    counts = np.zeros(n_buckets, np.int64)
    for start in range(0, x.size, _CHUNK):
        part = x[start : start + _CHUNK]
        idx = _buckets(part, lo, scale, work, out[start : start + part.size])
        counts += np.bincount(idx, minlength=n_buckets)
    return counts, out[: x.size]


def ks_statistic_unsorted(a: np.ndarray, b: np.ndarray, scratch: Scratch | None = None) -> float:
    """:func:`ks_statistic` of two NaN-free samples in any order, without sorting them.

    Count both samples into the buckets of :func:`_buckets`; with ``A[k]``, ``B[k]`` the
    counts below bucket ``k``, every point of bucket ``k`` has ``F_a - F_b`` between
    ``A[k]/n_a - B[k+1]/n_b`` and ``A[k+1]/n_a - B[k]/n_b``, and the last pooled point of a
    bucket has exactly ``A[k+1]/n_a - B[k+1]/n_b``. The largest of those exact values is a
    floor for the maximum; only buckets whose bound reaches it can hold a larger value, and
    only their values are sorted and compared, with counts offset by the buckets below. Every
    value compared is the float expression scipy computes (counts divided by sizes, then
    subtracted), so the result is scipy's statistic bit for bit.
    """
    na, nb = a.size, b.size
    grid = None if na + nb < _SORT_BELOW else _grid(a, b)
    if grid is None:
        return ks_statistic(np.sort(a), np.sort(b))
    lo, scale = grid
    work, out_a, out_b = (scratch or Scratch()).take(max(na, nb))
    n_buckets = _GRID + 2
    count_a, ia = _bucket_counts(a, lo, scale, work, out_a, n_buckets)
    count_b, ib = _bucket_counts(b, lo, scale, work, out_b, n_buckets)
    below_a = np.zeros(n_buckets + 1, np.int64)
    below_b = np.zeros(n_buckets + 1, np.int64)
    np.cumsum(count_a, out=below_a[1:])
    np.cumsum(count_b, out=below_b[1:])
    fa, fb = below_a / na, below_b / nb
    ends = fa[1:] - fb[1:]  # F_a - F_b at each bucket's last pooled point (or the one before)
    best_max, best_min = max(float(ends.max()), 0.0), max(float((-ends).max()), 0.0)
    open_max = (count_a > 0) & (fa[1:] - fb[:-1] >= best_max)
    open_min = (count_b > 0) & (fb[1:] - fa[:-1] >= best_min)
    refine = open_max | open_min
    if refine.any():
        # the float work array is free again: its bytes hold the masks (no fresh pages)
        ca = np.sort(a[_in_buckets(refine, ia, work.view(np.bool_)[:na])])
        cb = np.sort(b[_in_buckets(refine, ib, work.view(np.bool_)[:nb])])
        ka = _buckets(ca, lo, scale, np.empty(ca.size), np.empty(ca.size, np.intp))
        kb = _buckets(cb, lo, scale, np.empty(cb.size), np.empty(cb.size, np.intp))
        # values of each side below bucket k that are not among the refined ones
        skip_a, skip_b = _skipped(below_a, ka, n_buckets), _skipped(below_b, kb, n_buckets)
        best_max = _refined_gap(ca, ka, cb, open_max, skip_a, skip_b, na, nb, best_max)
        best_min = _refined_gap(cb, kb, ca, open_min, skip_b, skip_a, nb, na, best_min)
    return best_min if best_min > best_max else best_max


def _in_buckets(buckets: np.ndarray, idx: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``buckets[idx]`` into ``out``, a chunk at a time (``take`` would first copy all of the
    32-bit ``idx`` to 64-bit indices)."""
    for start in range(0, idx.size, _CHUNK):
        np.take(buckets, idx[start : start + _CHUNK], out=out[start : start + _CHUNK])
    return out


def _skipped(below: np.ndarray, refined_buckets: np.ndarray, n_buckets: int) -> np.ndarray:
    """Values below each bucket that were not refined: all below it, less the refined ones."""
    refined = np.bincount(refined_buckets, minlength=n_buckets)
    out: np.ndarray = below[:-1] - (np.cumsum(refined) - refined)
    return out


def _refined_gap(
    x: np.ndarray,
    kx: np.ndarray,
    y: np.ndarray,
    open_: np.ndarray,
    skip_x: np.ndarray,
    skip_y: np.ndarray,
    nx: int,
    ny: int,
    best: float,
) -> float:
    """``max(best, F_x(x_i) - F_y(x_i))`` over the refined values ``x_i`` in the open buckets.

    ``x``, ``y``: the refined values of each side, sorted (so in bucket order too); ``kx``
    the buckets of ``x``; ``skip_*`` the values of each side below a bucket not refined. The
    rank of ``x_i`` in the whole sample is its rank among the refined values plus the values
    skipped below its bucket; as in :func:`_max_ecdf_gap`,
    ``(rank+1)/n_x`` is below the true ECDF inside a run of ties and never wins.
    """
    pick = np.flatnonzero(open_[kx])
    if pick.size == 0:
        return best
    k = kx[pick]
    rank_x = skip_x[k] + pick
    count_y = skip_y[k] + np.searchsorted(y, x[pick], side="right")
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
        terms = _term_ratios(a[part], n, nx_f, n_below)
        np.cumprod(terms, axis=1, out=terms)
        terms *= anchor[part, None]
        total += np.sum(terms, dtype=ld)
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

"""The compiled passes of the KS counting test: each reads a sample once.

The bucket of a value is ``trunc(clip(float32(x - lo) · float32(scale), 0, grid + 1))``. Each
step is monotone (IEEE rounding is, float64 to float32 included), so ``x <= y`` implies
``bucket(x) <= bucket(y)``: a lower bucket holds only smaller values, whatever the rounding.
±inf and values beyond float32 land in the end buckets; NaN, which has no place in an ECDF,
is counted apart. Every pass computes the bucket with the same function, so a
value is counted, picked and placed in the same bucket.

As NumPy, the count would be five passes over the data (subtract, scale, clip, truncate,
``bincount``), plus a gather to pick the values of chosen buckets; compiled, it is one pass,
the bucket arithmetic of a chunk vectorised and then counted — about three times cheaper.
Compiled on first use and cached on disk (``cache=True``), so a new process pays only the load;
the install compiles them ahead (``python -m rlops.pipeline_steps.drift.ks_kernels``), so the
first drift check after it does not pay the ~2 s either.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_CHUNK = 4096  # values whose buckets are computed together, then counted: the work stays in L1
_FLUSH_EVERY = (1 << 30) // _CHUNK  # chunks counted in int32 before the int64 total takes them


@njit(inline="always", nogil=True)
def _bucket(v, lo, scale, top):  # type: ignore[no-untyped-def]  # numba infers the types
    # max(0, y) is y only when y > 0: NaN goes to 0 like the negatives (no branch: vectorises)
    return np.int32(min(top, max(np.float32(0.0), np.float32(v - lo) * scale)))


@njit(cache=True, nogil=True)
def bucket_counts(x, lo, scale, grid, where):  # type: ignore[no-untyped-def]
    """``(counts, n_nan)``: the counts of the non-NaN values of ``x`` in each of the ``grid + 2``
    buckets (int64), and how many values are NaN. The bucket of each value goes to ``where``
    (uint16, so ``grid + 2 <= 65536``), for :func:`values_in_buckets`."""
    total = np.zeros(grid + 2, np.int64)
    counts = np.zeros(grid + 2, np.int32)  # half the cache of int64; added to ``total`` before it could overflow
    buf = np.empty(_CHUNK, np.int32)
    s, top = np.float32(scale), np.float32(grid + 1.0)
    n, n_nan = x.size, 0
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        for j in range(m):
            v = x[start + j]
            buf[j] = _bucket(v, lo, s, top)
            n_nan += v != v
        for j in range(m):
            counts[buf[j]] += 1
            where[start + j] = buf[j]
        if (start // _CHUNK) % _FLUSH_EVERY == _FLUSH_EVERY - 1:
            total += counts
            counts[:] = 0
    total += counts
    total[0] -= n_nan  # NaN went to bucket 0
    return total, n_nan


@njit(cache=True, nogil=True)
def buckets_of(x, lo, scale, grid):  # type: ignore[no-untyped-def]
    """The bucket of every value of ``x`` (int64)."""
    out = np.empty(x.size, np.int64)
    s, top = np.float32(scale), np.float32(grid + 1.0)
    for i in range(x.size):
        out[i] = _bucket(x[i], lo, s, top)
    return out


@njit(cache=True, nogil=True)
def values_in_buckets(x, where, chosen, n_chosen):  # type: ignore[no-untyped-def]
    """The non-NaN values of ``x`` whose bucket (``where``, from :func:`bucket_counts`) is marked
    in ``chosen``, in their order; ``n_chosen`` is how many there are (their buckets' counts).
    The pass reads the 2-byte bucket codes; the 8-byte values only where a code is chosen."""
    out = np.empty(n_chosen, x.dtype)
    j = 0
    for i in range(x.size):
        if chosen[where[i]]:
            v = x[i]
            if v == v and j < n_chosen:
                out[j] = v
                j += 1
    return out


@njit(cache=True, nogil=True)
def gap_bounds(count_a, count_b, na, nb):  # type: ignore[no-untyped-def]
    """From the bucket counts of two samples of sizes ``na``, ``nb``: the counts below each
    bucket (``below[k]``, k = 0 … buckets), the largest ``F_a - F_b`` and ``F_b - F_a`` at bucket
    ends (at least 0), and the buckets whose bound reaches them (``open_max``, ``open_min``).
    Each value is the float expression of the NumPy formulation: counts divided by sizes,
    then subtracted (see :func:`rlops.pipeline_steps.drift.ks.ks_statistic_unsorted`)."""
    n_buckets = count_a.size
    below_a = np.zeros(n_buckets + 1, np.int64)
    below_b = np.zeros(n_buckets + 1, np.int64)
    fa = np.zeros(n_buckets + 1)
    fb = np.zeros(n_buckets + 1)
    best_max, best_min = 0.0, 0.0
    for k in range(n_buckets):
        below_a[k + 1] = below_a[k] + count_a[k]
        below_b[k + 1] = below_b[k] + count_b[k]
        fa[k + 1] = below_a[k + 1] / na
        fb[k + 1] = below_b[k + 1] / nb
        end = fa[k + 1] - fb[k + 1]
        best_max = max(best_max, end)
        best_min = max(best_min, -end)
    open_max = np.zeros(n_buckets, np.bool_)
    open_min = np.zeros(n_buckets, np.bool_)
    for k in range(n_buckets):
        open_max[k] = count_a[k] > 0 and fa[k + 1] - fb[k] >= best_max
        open_min[k] = count_b[k] > 0 and fb[k + 1] - fa[k] >= best_min
    return below_a, below_b, best_max, best_min, open_max, open_min


@njit(cache=True, nogil=True)
def anchored_sum(ratios, anchor):  # type: ignore[no-untyped-def]
    """``sum_i anchor[i] · cumprod(ratios[i])`` as a double-double ``(hi, lo)``: each row's running
    product in float64, as ``np.cumprod`` forms it, and the terms added with an error-free
    two-sum, so the sum of half a million terms loses nothing before the caller's rounding."""
    hi, lo = 0.0, 0.0
    for i in range(ratios.shape[0]):
        p = 1.0
        for j in range(ratios.shape[1]):
            p *= ratios[i, j]
            t = p * anchor[i]
            s = hi + t
            b = s - hi
            lo += (hi - (s - b)) + (t - b)
            hi = s
    return hi, lo


def compile_kernels() -> None:
    """Compile every kernel for the samples drift compares (float64 and int64, read-only views of
    a frame's columns and arrays of their own) into the on-disk cache."""
    grid = 14
    for dtype in (np.float64, np.int64):
        for read_only in (True, False):
            x = np.arange(32, dtype=dtype)
            x.flags.writeable = not read_only
            where = np.empty(x.size, np.uint16)
            counts, _ = bucket_counts(x, -1.0, 0.5, grid, where)
            values_in_buckets(x, where, counts > 0, int(counts.sum()))
            buckets_of(x, -1.0, 0.5, grid)
    gap_bounds(counts, counts, 32, 32)
    anchored_sum(np.ones((2, 16)), np.ones(2))


__all__ = ["anchored_sum", "bucket_counts", "buckets_of", "compile_kernels", "gap_bounds", "values_in_buckets"]

if __name__ == "__main__":
    compile_kernels()

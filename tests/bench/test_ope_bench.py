"""bench/ope.py judges DR's interval against a truth that is itself a sample mean."""

from __future__ import annotations

from bench.ope import covers


def test_the_truths_own_standard_error_counts_in_the_coverage() -> None:
    # DR 0.50 ± 1.96·0.03 = [0.4412, 0.5588] misses a truth of 0.44, but the truth has se 0.04:
    # |0.50 − 0.44| = 0.06 ≤ 1.96·√(0.03² + 0.04²) = 0.098
    assert covers(0.50, 0.03, 0.44, 0.04, 1.96)
    assert not covers(0.50, 0.03, 0.44, 0.0, 1.96)
    assert not covers(0.50, 0.03, 0.39, 0.04, 1.96)  # 0.11 > 0.098

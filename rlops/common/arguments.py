"""Validators for step arguments, run before any work: each returns the value (typed) or raises a
:class:`~rlops.common.errors.UserError` saying what, where and what was expected.

The command line, the DAG tasks and direct calls all reach the step functions, so the checks live
with the steps (which call these), not only in argparse.
"""

from __future__ import annotations

import math
from typing import Any

from rlops.common.errors import UserError

#: The most episodes one capture or evaluation may ask for: far above any real run, low enough
#: that a typo (an extra zero or three) is an error instead of hours of work.
MAX_EPISODES = 10_000_000
MAX_TIMESTEPS = 10_000_000_000


def count(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (booleans and fractions are refused)."""
    bad = isinstance(value, bool) or not isinstance(value, (int, float, str))
    number: int | None = None
    if not bad:
        try:
            as_float = float(value)
            bad = not math.isfinite(as_float) or as_float != int(as_float)
            number = None if bad else int(as_float)
        except (TypeError, ValueError):
            bad = True
    top = f" and at most {maximum:,}" if maximum is not None else ""
    if bad or number is None or number < minimum or (maximum is not None and number > maximum):
        raise UserError(f"argument {name} = {value!r}: expected a whole number of at least {minimum}{top}")
    return number


def fraction(name: str, value: Any) -> float:
    """``value`` as a float in ``(0, 1]`` (a sampling rate, a traffic share)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and 0.0 < number <= 1.0):
        raise UserError(f"argument {name} = {value!r}: expected a fraction in (0, 1], e.g. 0.1 for one episode in ten")
    return number


def choice(name: str, value: Any, allowed: Any) -> str:
    """``value`` when it is one of ``allowed``."""
    options = sorted(str(a) for a in allowed)
    if str(value) not in options:
        raise UserError(f"argument {name} = {value!r}: expected one of {options}")
    return str(value)

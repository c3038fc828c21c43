"""What a capture is asked to do: the options of ``rlops capture`` and of the capture DAG, declared
once (see :mod:`rlops.common.step_request`). ``None`` leaves an option to params ``capture:``; the
step checks every value, given or from params, the same way."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.step_request import option


@dataclass(frozen=True)
class CaptureRequest:
    """One capture's options."""

    simulate: bool | None = option(
        None,
        cli=False,  # the command spells it --simulate / --landing-zone, exclusive with the trace sources
        digest=False,
        help="true: sample the champion in the `live` simulation profile instead of reading the landing zone "
        "(recorded as source simulation:live); false: the landing zone only; null: the landing zone, simulated "
        "when it is empty and params say capture.simulate_when_empty",
    )
    episodes: int | None = option(
        None, dag=False, digest=False, help="simulated episodes (default: params capture.episodes)"
    )
    sample_rate: float | None = option(
        None,
        dag=False,
        digest=False,
        help="fraction of simulated episodes recorded (default: params capture.sample_rate)",
    )
    profile: str | None = option(
        None, dag=False, digest=False, help="simulation profile (default: params capture.profile, else live)"
    )


__all__ = ["CaptureRequest"]

"""What a capture is asked to do: the options of ``rlops capture`` and of the capture DAG, and of
``rlops import`` (a decision log from before rlops), declared once (see
:mod:`rlops.common.step_request`). ``None`` leaves an option to params ``capture:``; the step checks
every value, given or from params, the same way."""

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


@dataclass(frozen=True)
class ImportRequest:
    """One import's options."""

    path: str = option(required=True, help="the decision log: a .parquet, .csv or .jsonl file, a path or a URI")
    columns: str | None = option(
        None,
        help="TRACE=LOG pairs, comma-separated: the log's column holding each trace column, state field or "
        "`propensity` (e.g. episode_id=session,action=item,propensity=pscore,reward_total=click,ts=time)",
    )
    mapping: str | None = option(
        None,
        help="a YAML file: `columns:` {TRACE: LOG} as in --columns, `actions:` {logged value: pack action}, "
        "`constants:` {TRACE: value for every row}",
    )
    policy_version: str | None = option(
        None, help="the logging policy's name, when no column of the log says which policy served each row"
    )
    deterministic: bool = option(
        False, help="the logging policy chose deterministically: each logged action had propensity 1 (logp 0)"
    )


__all__ = ["CaptureRequest", "ImportRequest"]

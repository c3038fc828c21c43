"""Events-file probes of ``rlops simulate --dry-run``: an events file is data (docs/trust-model.md),
written by hand or by a script. Hostile files — Python object tags, billion laughs, non-UTF-8, a
folder, events naming fields, actions or APIs the pack lacks, expressions the sandbox's compiler
refuses, values that are not finite numbers — are refused with one line naming the file (exit 2)
by the dry run itself, as the real run would refuse them (never hours into a timeline), and nothing
the file names is run. Reward-module paths are probed in tests/pipeline_steps/orchestration/
test_event_modules.py. One test per probe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, run_probe
from .probes_packs import bomb

OWNED = "OWNED"


def events(text: str | bytes | None, *mentions: str, ok: bool = False) -> Callable[[Path], Verdict]:
    """``simulate --dry-run`` over ``events.yaml`` holding ``text`` (a folder when None; ``{tmp}`` the
    probe's folder): refused naming ``mentions``, or accepted when ``ok``; never running a command."""

    def run(tmp: Path) -> Verdict:
        path = tmp / "events.yaml"
        if text is None:
            path.mkdir()
        elif isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text.replace("{tmp}", str(tmp)))
        argv = ["simulate", "--scenario", "credit_approval", "--hours", "4", "--events", str(path), "--dry-run"]
        argv += ["--workdir", str(tmp / "timeline")]
        if ok:
            rc, _, err = cli(argv)
            verdict: Verdict = None if rc == 0 else ("accepted", f"a valid events file was refused: {err.strip()}")
        else:
            verdict = expect_cli_error(argv, 2, ("events", *mentions))
        if (tmp / OWNED).exists():
            return "security", "the events file ran a command"
        if (tmp / "timeline").exists():
            return "lost", "the dry run created the timeline's folder"
        return verdict

    return run


def one(event: str) -> str:
    return f"events:\n- {event}\n"


OUTCOME = "{at_hour: 1, kind: outcome, field: hidden.default_prob, "
TOUCH = f"__import__('os').system('touch {{tmp}}/{OWNED}')"

CASES: dict[str, tuple[str | bytes | None, tuple[str, ...]]] = {
    "python-object-tag": (f"events: !!python/object/apply:os.system ['touch {{tmp}}/{OWNED}']\n", ("not valid YAML",)),
    "python-name-tag": ("events: !!python/name:os.system\n", ("not valid YAML",)),
    "billion-laughs": (bomb(8) + "events: *a8\n", ("aliases", "expands")),
    # aliased where a single string belongs: refused by counting the expanded values, before any
    # check shows (or copies) the billion of them
    "outcome-when-billion-laughs": (bomb(9) + one(OUTCOME + "factor: 2, when: *a9}"), ("aliases", "expands")),
    "non-utf8": (b"events:\n- {at_hour: 1, kind: \xff}\n", ("UTF-8",)),
    "a-folder": (None, ("not found",)),
    "not-a-list": ("events: {at_hour: 1}\n", ("expected a list",)),
    "unclosed": ("events: [\n", ("not valid YAML",)),
    "kind-unknown": (one("{at_hour: 1, kind: meteor}"), ("kind",)),
    "kind-a-list": (one("{at_hour: 1, kind: [latency]}"), ("kind",)),
    "at-hour-text": (one("{at_hour: soon, kind: bad_candidate}"), ("at_hour",)),
    "at-hour-nan": (one("{at_hour: .nan, kind: bad_candidate}"), ("at_hour",)),
    "at-hour-negative": (one("{at_hour: -1, kind: bad_candidate}"), ("at_hour",)),
    "at-hour-bool": (one("{at_hour: true, kind: bad_candidate}"), ("at_hour",)),
    "at-hour-past-the-end": (one("{at_hour: 99, kind: bad_candidate}"), ("at_hour",)),
    "latency-infinite": (one("{at_hour: 1, kind: latency, action: approve, factor: .inf}"), ("factor",)),
    "latency-boolean": (one("{at_hour: 1, kind: latency, action: approve, factor: true}"), ("factor",)),
    "latency-unknown-action": (one("{at_hour: 1, kind: latency, action: launch, factor: 2}"), ("no action",)),
    "error-rate-nan": (one("{at_hour: 1, kind: error_rate, api: credit_bureau, rate: .nan}"), ("rate",)),
    "error-rate-unknown-api": (one("{at_hour: 1, kind: error_rate, api: nope, rate: 0.5}"), ("no API",)),
    "population-unknown-field": (one("{at_hour: 1, kind: population, init: {nope.age: {dist: normal}}}"), ("nope",)),
    "population-bad-distribution": (
        one("{at_hour: 1, kind: population, init: {user_profile.age: {dist: meteor}}}"),
        ("production world",),
    ),
    "outcome-unknown-field": (one("{at_hour: 1, kind: outcome, field: hidden.nope, factor: 2}"), ("hidden.nope",)),
    "outcome-infinite-factor": (one(OUTCOME + "factor: .inf}"), ("factor",)),
    "outcome-expr-import": (one(OUTCOME + f'expr: "{TOUCH}"}}'), ("illegal expression",)),
    "outcome-expr-dunder": (one(OUTCOME + 'expr: "().__class__.__bases__[0]"}'), ("illegal expression",)),
    "outcome-expr-syntax": (one(OUTCOME + 'expr: "1 +"}'), ("syntax error",)),
    "outcome-when-unknown-field": (one(OUTCOME + 'factor: 2, when: "nope.x > 1"}'), ("production world",)),
    "reward-fn-version-path": (one("{at_hour: 1, kind: reward_fn, version: ../v2}"), ("version",)),
}

PROBES = [
    *(IOProbe(f"events-{k}", events(text, *m)) for k, (text, m) in CASES.items()),
    IOProbe("events-valid-control", events(one(OUTCOME + 'factor: 2, when: "user_profile.age >= 60"}'), ok=True)),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_events_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

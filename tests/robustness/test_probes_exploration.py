"""Exploration settings probes: ``exploration.share``, ``exploration.distribution`` and
``exploration.off_segment`` decide the propensity written on every live row, so a bad one —
negative, over 0.5, NaN, infinite, text, a boolean, a list, an unknown distribution, a segment that
reads no field of the pack, is no condition, calls a function or is blank — is refused by
``rlops config validate`` and by a command that uses it (``rlops model evaluate --target rules``,
which serves the rule engine with that exploration), with one line naming the key, its file and
line, never when the first request explores. The control: a valid segment is named in the estimate.
One test per probe."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ope_target_kit import RUN_KEY, SCENARIO, logged_rows, write_window

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, ids, run_probe
from .test_probes_params import environment

VALIDATE = ["config", "validate", "--scenario", SCENARIO]
EVALUATE = ["model", "evaluate", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--direct-method", "none"]


def _window() -> None:
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    write_window(ctx.storage, ctx.uri, logged_rows())


def with_params(text: str, argv: list[str], mentions: tuple[str, ...]) -> Callable[[Path], Verdict]:
    """``RLOPS_PARAMS`` names a file holding ``text``: ``argv`` exits 2 naming the file and ``mentions``."""

    def run(tmp: Path) -> Verdict:
        path = tmp / "params.yaml"
        path.write_text(text.replace("{tmp}", str(tmp)))
        if argv[0] == "model":
            _window()  # under the repository's params: the bad ones are the command's to refuse
        with environment(RLOPS_PARAMS=str(path)):
            verdict = expect_cli_error(argv, 2, ("params.yaml:", *mentions))
        return ("security", "the segment ran a command") if (tmp / "OWNED").exists() else verdict

    return run


def exploration(**values: str) -> str:
    return "exploration:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items())


def control(tmp: Path) -> Verdict:
    """A valid segment: the rule engine's estimate says where it does not explore, exit 0."""
    path = tmp / "params.yaml"
    path.write_text(exploration(share="0.1", off_segment="'user_profile.age >= 75'"))
    with environment(RLOPS_PARAMS=str(path)):
        _window()
        rc, out, err = cli([*EVALUATE, "--target", "rules", "--json"])
    if rc != 0:
        return "accepted", f"a valid segment was refused (exit {rc}): {err.strip()[-300:]}"
    serves = json.loads(out)["serves"]
    return None if "user_profile.age >= 75" in serves else ("accepted", f"the segment is not named: {serves!r}")


BAD: dict[str, tuple[str, tuple[str, ...]]] = {
    "share-negative": (exploration(share="-0.1"), ("exploration.share", "greater than or equal to 0")),
    "share-over-half": (exploration(share="0.6"), ("exploration.share", "less than or equal to 0.5")),
    "share-one": (exploration(share="1"), ("exploration.share", "0.5")),
    "share-nan": (exploration(share=".nan"), ("exploration.share", "finite")),
    "share-infinite": (exploration(share=".inf"), ("exploration.share", "finite")),
    "share-text": (exploration(share="lots"), ("exploration.share", "'lots'")),
    "share-percent": (exploration(share="5%"), ("exploration.share", "'5%'")),
    "share-boolean": (exploration(share="true"), ("exploration.share", "boolean")),
    "share-list": (exploration(share="[0.1]"), ("exploration.share",)),
    "share-null": (exploration(share="null"), ("exploration.share",)),
    "distribution-unknown": (exploration(distribution="greedy"), ("exploration.distribution", "'greedy'")),
    "distribution-case": (exploration(distribution="Uniform"), ("exploration.distribution", "'uniform'")),
    "distribution-number": (exploration(distribution="1"), ("exploration.distribution",)),
    "distribution-null": (exploration(distribution="null"), ("exploration.distribution",)),
    "key-typo": (exploration(shares="0.1"), ("exploration.shares", "did you mean 'share'")),
    "block-a-list": ("exploration: [0.1]\n", ("exploration",)),
    "block-a-number": ("exploration: 0.1\n", ("exploration",)),
    "segment-unknown-field": (exploration(off_segment="'nope.field >= 3'"), ("off_segment", "unknown field")),
    "segment-syntax": (exploration(off_segment="'user_profile.age >= '"), ("off_segment", "syntax error")),
    "segment-not-a-condition": (exploration(off_segment="user_profile.age"), ("off_segment", "expected bool")),
    "segment-call": (
        exploration(off_segment='\'__import__("os").system("touch {tmp}/OWNED")\''),
        ("off_segment", "only plain calls"),
    ),
    "segment-blank": (exploration(off_segment="'  '"), ("off_segment", "blank")),
    "segment-number": (exploration(off_segment="5"), ("off_segment", "valid string")),
    "segment-huge": (
        exploration(off_segment="'" + " or ".join(["user_profile.age >= 75"] * 2000) + "'"),
        ("off_segment", "over the limit"),
    ),
}

#: The ones a command using the settings must refuse as config validate does.
IN_A_COMMAND = ("share-over-half", "share-nan", "distribution-unknown", "segment-unknown-field", "segment-blank")

PROBES = [
    IOProbe("exploration_control", control),
    *(IOProbe(f"exploration_{k}", with_params(text, VALIDATE, m)) for k, (text, m) in BAD.items()),
    *(
        IOProbe(f"exploration_evaluate-{k}", with_params(BAD[k][0], [*EVALUATE, "--target", "rules"], BAD[k][1]))
        for k in IN_A_COMMAND
    ),
]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_exploration_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

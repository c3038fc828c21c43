"""Steering probes: the inputs a business expert types to steer the policy — ``rlops reward whatif``'s
``--set OBJECTIVE=WEIGHT`` and ``--param NAME=VALUE``, and the segment expressions of a staged
roll-out (``evaluate.rollout_stages``) — each garbled the ways a person or a script garbles them:
text, NaN, infinity, out of range, a name that is no objective or constant, Python where a number
belongs, a segment that reads hidden state, calls a function or does not parse, a share outside
(0, 1]. Each must end in one ``error:`` line naming the input, exit 2, before any training or
write, and never run what it names. One test per probe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .io_harness import IOProbe, Verdict, check, expect_cli_error, run_probe
from .test_probes_params import environment

WHATIF = ["reward", "whatif", "--scenario", "credit_approval", "--dry-run"]


def whatif(args: list[str], *mentions: str) -> Callable[[Path], Verdict]:
    def run(tmp: Path) -> Verdict:
        verdict = expect_cli_error([*WHATIF, *args], 2, mentions)
        if verdict is None and any(tmp.parent.parent.rglob("reward_v2.py")):
            return "lost", "a refused what-if wrote a reward module"
        return verdict

    return run


WHATIF_PROBES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "set-text": (["--set", "compliance=abc"], ("--set", "not a number")),
    "set-unknown-objective": (["--set", "nosuch=1"], ("nosuch", "objectives")),
    "set-nan": (["--set", "compliance=nan"], ("finite",)),
    "set-infinity": (["--set", "compliance=inf"], ("finite",)),
    "set-overflow": (["--set", "compliance=1e400"], ("finite",)),
    "set-negative": (["--set", "compliance=-1"], ("compliance", "[0, 10]")),
    "set-no-value": (["--set", "compliance"], ("NAME=VALUE",)),
    "set-empty-name": (["--set", "=0.5"], ("--set",)),
    "set-python": (["--set", "compliance=__import__('os').getpid()"], ("not a number",)),
    "set-twice-differently": (["--set", "compliance=0.5", "--set", "compliance=0.7"], ("compliance",)),
    "param-unknown": (["--param", "NOPE=1"], ("NOPE", "PARAMS")),
    "param-out-of-range": (["--param", "HUMAN_COST=99"], ("HUMAN_COST", "range")),
    "param-nan": (["--param", "HUMAN_COST=nan"], ("finite",)),
    "param-python": (["--param", "CAP_MULTIPLE=__import__('os')"], ("not a number",)),
    "param-dunder": (["--param", "__builtins__=1"], ("__builtins__",)),
    "episodes-zero": (["--episodes", "0"], ("--episodes",)),
    "timesteps-negative": (["--timesteps", "-5"], ("--timesteps",)),
    "threads-zero": (["--threads", "0"], ("--threads",)),
    "reward-fn-unknown": (["--reward-fn", "v9"], ("v9",)),
    "reward-fn-path": (["--reward-fn", "../../etc/passwd"], ("reward",)),
}


def stages(first: str, *mentions: str) -> Callable[[Path], Verdict]:
    """A params file whose roll-out's first stage is ``first`` (a YAML flow mapping), then everyone:
    ``config validate`` names the stage and the problem, and nothing the expression names runs."""

    def run(tmp: Path) -> Verdict:
        path = tmp / "params.yaml"
        body = first.replace("{tmp}", str(tmp))
        path.write_text(f"evaluate:\n  rollout_stages:\n    - {body}\n    - {{segment: null, share: 1.0}}\n")
        with environment(RLOPS_PARAMS=str(path)):
            verdict = expect_cli_error(["config", "validate"], 2, ("evaluate.rollout_stages", *mentions))
        if (tmp / "OWNED").exists():
            return "security", "a segment expression ran a command"
        return verdict

    return run


GUANGDONG = "\"user_profile.region == 'guangdong'\""
SEGMENT_PROBES: dict[str, tuple[str, tuple[str, ...]]] = {
    "unknown-field": ("{segment: \"user_profile.nosuch == 'x'\", share: 1.0}", ("unknown field",)),
    "hidden-field": ('{segment: "hidden.is_fraud", share: 1.0}', ("hidden.is_fraud",)),
    "python-call": ("{segment: \"__import__('os').system('touch {tmp}/OWNED')\", share: 1.0}", ("calls",)),
    "attribute-escape": ('{segment: "user_profile.__class__", share: 1.0}', ("segment",)),
    "does-not-parse": ('{segment: "user_profile.region ==", share: 1.0}', ("not an expression",)),
    "number-for-expression": ("{segment: 42, share: 1.0}", ("valid string",)),
    "share-above-one": (f"{{segment: {GUANGDONG}, share: 2.0}}", ("share",)),
    "share-nan": (f"{{segment: {GUANGDONG}, share: .nan}}", ("share", "finite")),
    "share-negative": (f"{{segment: {GUANGDONG}, share: -0.5}}", ("share",)),
    "share-text": (f"{{segment: {GUANGDONG}, share: half}}", ("share",)),
    "unknown-key": (f"{{segment: {GUANGDONG}, share: 1.0, owner: eve}}", ("owner",)),
}

PROBES = [
    *(IOProbe(f"whatif-{k}", whatif(a, *m)) for k, (a, m) in WHATIF_PROBES.items()),
    *(IOProbe(f"segment-{k}", stages(s, *m)) for k, (s, m) in SEGMENT_PROBES.items()),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_steering_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))

"""Bad scenario packs through ``rlops env validate``: each must come back within the timeout
with exit code 2 and one line naming the file and what was expected."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import Probe
from .packs import (
    REWARD,
    SCENARIO,
    Setup,
    linked_out,
    pack_with,
    reward_prelude,
    reward_returning,
    scenario_edit,
    write_pack,
)

SECRET = "AKIAEXAMPLESECRET0042"
PACK = "{tmp}/pack"


def validate(
    id: str,
    setup: Setup,
    *mentions: str,
    forbid: tuple[str, ...] = (),
    check: object = None,
    options: tuple[str, ...] = (),
) -> Probe:
    return Probe(f"pack_{id}", ("env", "validate", "--scenario", PACK, *options), setup, mentions, forbid, check=check)  # type: ignore[arg-type]


#: Probes that burn CPU until stopped use a short limit; the ones at the default limit show that
#: the default answers within the harness's timeout.
SHORT = ("--timeout", "1.5")


def not_executed(tmp: Path) -> str | None:
    return "code from outside the pack was executed" if (tmp / "EXECUTED").exists() else None


def bomb(levels: int = 9) -> str:
    """A "billion laughs" document: 10 ** levels values from a few hundred bytes."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def fifo_scenario(tmp: Path) -> None:
    pack = write_pack(tmp)
    (pack / "scenario.yaml").unlink()
    os.mkfifo(pack / "scenario.yaml")


def folder_scenario(tmp: Path) -> None:
    pack = write_pack(tmp)
    (pack / "scenario.yaml").unlink()
    (pack / "scenario.yaml").mkdir()


def dangling_link(tmp: Path) -> None:
    pack = write_pack(tmp)
    (pack / "rules.yaml").unlink()
    os.symlink(tmp / "nowhere.yaml", pack / "rules.yaml")


def mark(tmp_code: str) -> str:
    """Python that leaves a marker file when it runs (a module that must never be executed)."""
    return f"open('{{tmp}}/EXECUTED', 'w').write('ran')\n{tmp_code}"


NOT_FINISH = 'torch.where(t.action == "finish", 1.0, -0.1)'
ORACLE_OK = (
    "def make_oracle(pack):\n    def act(env):\n        return env.action_masks().float().argmax(dim=1)\n"
    "    return act\n"
)

PROBES: list[Probe] = [
    # ---- controls: a valid pack passes (the harness must not reward refusing everything)
    Probe("pack_valid_tiny", ("env", "validate", "--scenario", PACK), pack_with(), expect_ok=True),
    Probe(
        "pack_valid_with_oracle",
        ("env", "validate", "--scenario", PACK),
        pack_with(extra={"oracle.py": ORACLE_OK}),
        expect_ok=True,
    ),
    Probe("pack_valid_credit", ("env", "validate", "--scenario", "scenarios/credit_approval"), expect_ok=True),
    # ---- YAML bombs and sizes
    validate(
        "yaml_alias_bomb_scenario",
        pack_with(scenario=SCENARIO + "x_bomb:\n" + "".join("  " + line + "\n" for line in bomb().splitlines())),
        "scenario.yaml",
        "alias",
    ),
    validate(
        "yaml_alias_bomb_rules",
        pack_with(rules="rules:\n  R1: {title: Finishing pays}\n" + bomb()),
        "rules.yaml",
        "alias",
    ),
    validate("yaml_alias_bomb_params", pack_with(extra={"params.yaml": bomb()}), "params.yaml", "alias"),
    validate(
        "yaml_recursive_alias", pack_with(scenario=SCENARIO + "loop: &l [1, *l]\n"), "scenario.yaml", "recursive alias"
    ),
    validate(
        "yaml_deep_nesting",
        pack_with(scenario=SCENARIO + "deep: " + "[" * 3000 + "]" * 3000 + "\n"),
        "scenario.yaml",
        "nested too deeply",
    ),
    validate(
        "yaml_huge_document",
        pack_with(scenario=SCENARIO + "#" + "x" * (2 << 20) + "\n"),
        "scenario.yaml",
        "over the limit",
    ),
    validate("horizon_1e8", scenario_edit("horizon: 5", "horizon: 100000000"), "scenario.yaml:3", "horizon", "limit"),
    validate("horizon_huge_int", scenario_edit("horizon: 5", "horizon: " + "9" * 40), "horizon", "limit"),
    validate("horizon_float", scenario_edit("horizon: 5", "horizon: 5.5"), "horizon", "positive int"),
    validate(
        "history_len_1e9", scenario_edit("horizon: 5", "horizon: 5\nhistory_len: 1000000000"), "history_len", "limit"
    ),
    validate(
        "too_many_enum_values",
        scenario_edit(
            "    done: {type: bool, init: false}",
            "    done: {type: bool, init: false}\n    kind: {type: enum, "
            "init: v0, values: [" + ", ".join(f"v{i}" for i in range(2000)) + "]}",
        ),
        "at most",
    ),
    # ---- files that escape the pack, or are not files, or not text
    validate(
        "scenario_links_outside",
        linked_out("scenario.yaml", f"aws_secret_access_key: {SECRET}\n[bad"),
        "scenario.yaml",
        "outside the pack",
        forbid=(SECRET,),
    ),
    validate(
        "rules_links_outside",
        linked_out("rules.yaml", f"{SECRET}: [\n"),
        "rules.yaml",
        "outside the pack",
        forbid=(SECRET,),
    ),
    validate(
        "params_links_outside",
        linked_out("params.yaml", f"token: {SECRET}\n"),
        "params.yaml",
        "outside the pack",
        forbid=(SECRET,),
    ),
    validate(
        "reward_links_outside",
        linked_out("reward_v1.py", mark(REWARD)),
        "reward_v1.py",
        "outside the pack",
        check=not_executed,
    ),
    validate(
        "extra_reward_links_outside",
        linked_out("reward_v2.py", mark(REWARD)),
        "reward_v2.py",
        "outside the pack",
        check=not_executed,
    ),
    validate(
        "oracle_links_outside",
        linked_out("oracle.py", mark(ORACLE_OK)),
        "oracle.py",
        "outside the pack",
        check=not_executed,
    ),
    validate("scenario_is_a_fifo", fifo_scenario, "scenario.yaml", "regular file"),
    validate("scenario_is_a_folder", folder_scenario, "scenario.yaml", "regular file"),
    validate("rules_dangling_link", dangling_link, "rules.yaml", "cannot read"),
    validate("scenario_not_utf8", pack_with(scenario=SCENARIO.encode() + b"# caf\xe9\n"), "scenario.yaml:20", "UTF-8"),
    validate("rules_not_utf8", pack_with(rules=b"rules:\n  R1: {title: \xff\xfe}\n"), "rules.yaml:2", "UTF-8"),
    validate("reward_not_utf8", pack_with(reward=REWARD.encode() + b"# \xe9t\xe9\n"), "reward_v1.py", "UTF-8"),
    validate("params_not_utf8", pack_with(extra={"params.yaml": b"\x80\x81: 1\n"}), "params.yaml:1", "UTF-8"),
    validate("scenario_nul_bytes", pack_with(scenario=SCENARIO + "\x00\x00\n"), "scenario.yaml", "invalid YAML"),
    # ---- values that are not numbers: NaN and infinity in distributions, ranges, rates
    validate("normal_mean_nan", scenario_edit("mean: 0, std: 1", "mean: .nan, std: 1"), "case.score.init", "finite"),
    validate("normal_std_inf", scenario_edit("mean: 0, std: 1", "mean: 0, std: .inf"), "case.score.init", "finite"),
    validate(
        "uniform_low_minus_inf",
        scenario_edit("low: 1, high: 100", "low: -.inf, high: 100"),
        "case.amount.init",
        "finite",
    ),
    validate("field_max_inf", scenario_edit("min: 0, max: 100", "min: 0, max: .inf"), "case.amount.max", "finite"),
    validate("field_min_nan", scenario_edit("min: 0, max: 100", "min: .nan, max: 100"), "case.amount.min", "finite"),
    validate(
        "init_value_nan",
        scenario_edit("init: {dist: normal, mean: 0, std: 1}", "init: .nan"),
        "case.score.init",
        "finite",
    ),
    validate(
        "init_huge_int",
        scenario_edit("init: {dist: normal, mean: 0, std: 1}", "init: 1" + "0" * 400),
        "case.score.init",
        "finite",
    ),
    validate(
        "bernoulli_p_nan",
        scenario_edit("done: {type: bool, init: false}", "done: {type: bool, init: {dist: bernoulli, p: .nan}}"),
        "case.done.init",
        "finite",
    ),
    validate(
        "latency_inf",
        scenario_edit("latency_ms: {mean: 10, std: 1}", "latency_ms: {mean: .inf, std: 1}"),
        "actions.work.latency_ms.mean",
        "finite",
    ),
    validate(
        "error_rate_nan",
        scenario_edit("latency_ms: {mean: 10, std: 1}", "latency_ms: {mean: 10, std: 1}\n    error_rate: .nan"),
        "actions.work.error_rate",
        "finite",
    ),
    validate(
        "effect_prob_nan",
        scenario_edit("      - set: {case.done: true}", "      - set: {case.done: true}\n        prob: .nan"),
        "actions.finish.effects[0].prob",
        "within [0, 1]",
    ),
    validate(
        "init_expr_minus_inf",
        scenario_edit("init: {dist: normal, mean: 0, std: 1}", 'init: {expr: "log(case.amount - case.amount)"}'),
        "case.score",
        "not a finite number",
    ),
    validate(
        "effect_makes_nan",
        scenario_edit('set: {case.amount: "case.amount * 0.5"}', 'set: {case.score: "log(0 - case.amount)"}'),
        "case.score",
        "not a finite number",
    ),
    validate(
        "normal_std_huge", scenario_edit("mean: 0, std: 1", "mean: 0, std: 1.0e+300"), "case.score.init", "finite"
    ),
    validate(
        "effect_overflows_float32",
        scenario_edit('set: {case.amount: "case.amount * 0.5"}', 'set: {case.score: "case.score * 1e20 + 1e20"}'),
        "case.score",
        "not a finite number",
    ),
    validate("expr_literal_beyond_float32", scenario_edit('"case.amount * 0.5"', '"case.amount * 1e300"'), "too large"),
    validate(
        "yaml_int_too_long", scenario_edit("horizon: 5", "horizon: " + "7" * 5000), "scenario.yaml", "invalid YAML"
    ),
    validate("yaml_bad_date", scenario_edit("horizon: 5", "horizon: 2026-13-45"), "scenario.yaml", "invalid YAML"),
    # ---- actions that can never be legal
    validate(
        "action_precondition_false",
        scenario_edit('precondition: "not case.done"', "precondition: false"),
        "scenario.yaml:10",
        "never legal",
        "actions.work",
    ),
    validate(
        "action_precondition_unreachable",
        scenario_edit('precondition: "not case.done"', 'precondition: "case.amount > 1000"'),
        "never legal",
        "actions.work",
    ),
    # ---- expression bombs
    validate(
        "expr_power_tower",
        scenario_edit('"case.amount * 0.5"', '"case.amount * 10**10**10"'),
        "scenario.yaml",
        "cannot be computed",
        "actions.work.effects[0].set.case.amount",
    ),
    validate(
        "expr_division_by_zero", scenario_edit('"case.amount * 0.5"', '"case.amount * (1/0)"'), "division by zero"
    ),
    validate("expr_modulo_zero", scenario_edit('"case.amount * 0.5"', '"case.amount + 5 % 0"'), "division by zero"),
    validate(
        "expr_3000_nested_not",
        scenario_edit('precondition: "not case.done"', 'precondition: "' + "not " * 3000 + 'case.done"'),
        "actions.work.precondition",
        "limit",
    ),
    validate(
        "expr_900_nested_not",
        scenario_edit('precondition: "not case.done"', 'precondition: "' + "not " * 900 + 'case.done"'),
        "actions.work.precondition",
        "nested deeper",
    ),
    validate(
        "expr_deep_parentheses",
        scenario_edit('"case.amount * 0.5"', '"' + "(" * 500 + "case.amount" + ")" * 500 + '"'),
        "actions.work.effects[0].set.case.amount",
    ),
    validate("expr_huge_literal", scenario_edit('"case.amount * 0.5"', '"case.amount * 1e999"'), "too large"),
    validate(
        "expr_complex_power",
        scenario_edit('"case.amount * 0.5"', '"case.amount + (-8) ** 0.5"'),
        "not a finite real number",
    ),
    validate(
        "expr_dunder_attribute",
        scenario_edit('precondition: "not case.done"', 'precondition: "case.__class__"'),
        "unknown field",
    ),
    # ---- reward modules: at import
    validate("reward_loops_at_import", reward_prelude("while True:\n    pass"), "reward_v1.py", "did not finish"),
    validate(
        "reward_sleeps_at_import", reward_prelude("import time\ntime.sleep(3600)"), "reward_v1.py", "did not finish"
    ),
    validate(
        "reward_allocates_at_import", reward_prelude("HOARD = bytearray(64 << 30)"), "reward_v1.py", "MemoryError"
    ),
    validate("reward_exits_at_import", reward_prelude("import sys\nsys.exit(0)"), "reward_v1.py", "SystemExit"),
    validate(
        "reward_hard_exit_at_import",
        reward_prelude("import os\nos._exit(0)"),
        "reward_v1.py",
        "ended the validating process",
    ),
    validate(
        "reward_recursion_at_import",
        reward_prelude("def f(n):\n    return f(n + 1)\nf(0)"),
        "reward_v1.py",
        "RecursionError",
    ),
    validate(
        "reward_floods_output",
        reward_prelude("import sys\nfor _ in range(10 ** 6):\n    sys.stdout.write('x' * 1000)"),
        "reward_v1.py",
    ),
    # ---- reward modules: what components return on probe states
    validate("reward_raises", reward_returning("1 / 0"), "reward_v1.py:9", "ZeroDivisionError", "finished"),
    validate("reward_wrong_shape", reward_returning("torch.zeros(3)"), "reward_v1.py:9", "shape", "finished"),
    validate("reward_returns_string", reward_returning("'high'"), "reward_v1.py:9", "finished"),
    validate("reward_returns_none", reward_returning("None"), "reward_v1.py:9", "finished"),
    validate(
        "reward_returns_nan",
        reward_returning("torch.full_like(t.latency_ms, float('nan'))"),
        "reward_v1.py:9",
        "nan",
        "finite",
    ),
    validate("reward_returns_inf", reward_returning("float('inf')"), "reward_v1.py:9", "inf", "finite"),
    validate(
        "reward_divides_by_edge",
        reward_returning("1.0 / t.s.case.amount"),
        "reward_v1.py:9",
        "case.amount = 0",
        "finite",
    ),
    validate(
        "reward_nan_for_one_action",
        reward_returning("torch.where(t.action == 'work', float('nan'), 0.0)"),
        "action 'work'",
        "finite",
    ),
    validate(
        "reward_loops_when_called",
        reward_returning("[0 for _ in iter(int, 1)]"),
        "reward_v1.py",
        "did not finish",
        options=SHORT,
    ),
    validate(
        "reward_weight_nan",
        pack_with(reward=REWARD.replace('"service": 1.0', "\"service\": float('nan')")),
        "reward_v1.py:5",
        "WEIGHTS",
    ),
    validate(
        "reward_clip_inf",
        pack_with(reward=REWARD.replace("CLIP = 5.0", "CLIP = float('inf')")),
        "reward_v1.py:6",
        "CLIP",
    ),
    validate(
        "reward_penalty_inf",
        pack_with(
            reward=REWARD.replace(
                "CLIP = 5.0", "CLIP = 5.0\nREPEAT_PENALTY = {'penalty': float('inf'), 'after': 1, 'rule_ref': 'R1'}"
            )
        ),
        "REPEAT_PENALTY",
    ),
    validate(
        "reward_unknown_enum_value", reward_returning(NOT_FINISH.replace("finish", "finsh")), "reward_v1.py:9", "finsh"
    ),
    # ---- the oracle
    validate(
        "oracle_hangs_at_import",
        pack_with(extra={"oracle.py": "while True:\n    pass\n" + ORACLE_OK}),
        "oracle.py",
        "did not finish",
        options=SHORT,
    ),
    validate(
        "oracle_act_hangs",
        pack_with(
            extra={
                "oracle.py": ORACLE_OK.replace(
                    "        return", "        while True:\n            pass\n        return"
                )
            }
        ),
        "oracle.py",
        "did not finish",
        options=SHORT,
    ),
    validate(
        "oracle_raises",
        pack_with(extra={"oracle.py": "def make_oracle(pack):\n    raise KeyError('x')\n"}),
        "oracle.py:2",
        "KeyError",
    ),
    validate("oracle_without_make_oracle", pack_with(extra={"oracle.py": "X = 1\n"}), "oracle.py", "make_oracle"),
    validate(
        "oracle_illegal_actions",
        pack_with(
            extra={
                "oracle.py": ORACLE_OK.replace(
                    "env.action_masks().float().argmax(dim=1)", "env.action_masks().long().sum(dim=1) + 5"
                )
            }
        ),
        "oracle.py",
        "not legal",
    ),
    validate(
        "oracle_wrong_shape",
        pack_with(
            extra={"oracle.py": ORACLE_OK.replace("env.action_masks().float().argmax(dim=1)", "env.action_masks()")}
        ),
        "oracle.py",
        "shape",
    ),
]

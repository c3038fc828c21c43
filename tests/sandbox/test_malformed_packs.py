"""Malformed scenario packs: each is a copy of the credit pack with one mistake. ``rlops env
validate`` must exit 2 with one line on stderr naming the file, the line (where there is one),
the field path and what was expected, never a traceback; ``load_pack`` must raise
:class:`PackError` and return nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlops.cli import main
from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"


# ------------------------------------------------------------------------------------ mutations
def edit(file: str, old: str, new: str, after: str | None = None) -> Callable[[Path], None]:
    """Replace the first ``old`` (after the first ``after``, when given) in ``file`` by ``new``."""

    def mutate(pack: Path) -> None:
        text = (pack / file).read_text()
        start = 0 if after is None else text.index(after)
        i = text.index(old, start)
        (pack / file).write_text(text[:i] + new + text[i + len(old) :])

    return mutate


def delete(*files: str) -> Callable[[Path], None]:
    def mutate(pack: Path) -> None:
        for f in files:
            (pack / f).unlink()

    return mutate


def regex(file: str, pattern: str, new: str) -> Callable[[Path], None]:
    def mutate(pack: Path) -> None:
        text = (pack / file).read_text()
        out, n = re.subn(pattern, new, text, count=1, flags=re.S | re.M)
        assert n == 1, pattern
        (pack / file).write_text(out)

    return mutate


@dataclass
class Case:
    id: str
    mutate: Callable[[Path], None]
    file: str  # file the error names (a pack-relative name, "" for the folder)
    expect: tuple[str, ...]  # substrings of the message: what was expected
    path: str = ""  # the field path the error names ("" when none)
    line_of: str | None = None  # the error's line is the first line holding this text ...
    line_after: str | None = None  # ... searched after this text


S, R, V1 = "scenario.yaml", "rules.yaml", "reward_v1.py"
FRAUD = "  - name: initiate_fraud_check"
FETCH = "  - name: fetch_credit_report"
NOTIFY = "  - name: send_notification"
ESCALATE = "  - name: escalate_to_human"

CASES = [
    # ---- expressions
    Case(
        "unknown_field_in_expression",
        edit(S, "not system_status.credit_report_fetched and", "not system_status.report_fetched and"),
        S,
        ("illegal expression", "unknown field 'system_status.report_fetched'"),
        "actions.fetch_credit_report.precondition",
        FETCH,
    ),
    Case(
        "unknown_enum_in_expression",
        edit(S, "{when: \"decision.approval_result == 'pending'\"", "{when: \"decision.approval_result == 'pendng'\""),
        S,
        ("unknown enum value 'pendng'", "expected one of ['pending', 'approved'"),
        "rule_policy[5].when",
        "decision.approval_result == 'pendng'",
    ),
    Case(
        "illegal_import",
        edit(S, "terminal: decision.notified", "terminal: \"__import__('os')\""),
        S,
        ("illegal expression", "function '__import__' is not allowed"),
        "actions.send_notification.terminal",
        NOTIFY,
    ),
    Case(
        "illegal_lambda",
        edit(S, '{when: "true", action: send_notification}', '{when: "lambda: true", action: send_notification}'),
        S,
        ("'Lambda' is not allowed",),
        "rule_policy[6].when",
        "lambda: true",
    ),
    Case(
        "illegal_subscript",
        edit(S, "system_status.fraud_flag: hidden.is_fraud}", 'system_status.fraud_flag: "hidden.is_fraud[0]"}'),
        S,
        ("'Subscript' is not allowed",),
        "actions.initiate_fraud_check.effects[0].set.system_status.fraud_flag",
        "hidden.is_fraud[0]",
    ),
    Case(
        "illegal_open",
        edit(S, '{when: "not system_status.fraud_check_done"', "{when: \"open('/etc/passwd')\""),
        S,
        ("function 'open' is not allowed",),
        "rule_policy[0].when",
        "open('/etc/passwd')",
    ),
    Case(
        "expression_syntax_error",
        edit(S, "terminal: decision.notified", 'terminal: "decision.notified and"'),
        S,
        ("syntax error in expression",),
        "actions.send_notification.terminal",
        NOTIFY,
    ),
    Case(
        "expression_type_mismatch",
        edit(
            S,
            "precondition: \"decision.approval_result == 'pending'\"",
            'precondition: "decision.approved_amount + 1"',
            after=ESCALATE,
        ),
        S,
        ("type mismatch: expected bool, got number",),
        "actions.escalate_to_human.precondition",
        ESCALATE,
    ),
    Case(
        "random_draw_in_precondition",
        edit(
            S,
            "precondition: \"decision.approval_result == 'pending'\"",
            'precondition: "uniform(0, 1) < 0.5"',
            after=ESCALATE,
        ),
        S,
        ("random draw uniform() is only allowed in effects",),
        "actions.escalate_to_human.precondition",
        ESCALATE,
    ),
    Case(
        "field_used_before_initialised",
        edit(S, 'p: "0.02 + 0.06', 'p: "hidden.default_prob + 0.06'),
        S,
        ("field 'hidden.default_prob' is used before it is initialised",),
        "hidden.is_fraud.init.p",
        "        dist: bernoulli",
        "    is_fraud:",
    ),
    Case(
        "enum_effect_type_mismatch",
        edit(S, "set: {decision.approval_result: rejected}", "set: {decision.approval_result: decision.notified}"),
        S,
        ("expected enum decision.approval_result, got bool",),
        "actions.reject.effects[0].set.decision.approval_result",
        "decision.approval_result: decision.notified",
    ),
    # ---- structure and types
    Case(
        "unknown_top_level_key",
        edit(S, "horizon: 10\n", "horizon: 10\nhorizn: 12\n"),
        S,
        ("unknown key 'horizn'", "expected one of"),
        "horizn",
        "horizn: 12",
    ),
    Case(
        "unknown_field_key",
        edit(S, "unit: years,", "unit: years, fallback: 30,"),
        S,
        ("unknown key 'fallback'",),
        "user_profile.age.fallback",
        "fallback: 30",
    ),
    Case(
        "min_is_a_string",
        edit(S, "      min: 300\n", '      min: "abc"\n'),
        S,
        ("type mismatch: expected a number, got string 'abc'",),
        "user_profile.credit_score.min",
        'min: "abc"',
    ),
    Case(
        "horizon_is_a_string",
        edit(S, "horizon: 10", 'horizon: "x"'),
        S,
        ("horizon expects a positive int", "got string 'x'"),
        "horizon",
        'horizon: "x"',
    ),
    Case(
        "history_len_zero",
        edit(S, "history_len: 4", "history_len: 0"),
        S,
        ("history_len expects a positive int",),
        "history_len",
        "history_len: 0",
    ),
    Case(
        "min_greater_than_max",
        edit(S, "      min: 300\n", "      min: 950\n"),
        S,
        ("bad range: min 950 is greater than max 900",),
        "user_profile.credit_score",
        "min: 950",
    ),
    Case(
        "init_out_of_range",
        edit(S, "unit: CNY, init: 0}", "unit: CNY, init: -5}"),
        S,
        ("bad range: initial value -5 outside",),
        "decision.approved_amount.init",
        "init: -5}",
    ),
    Case(
        "bool_init_not_a_bool",
        edit(S, "fraud_check_done: {type: bool, init: false}", "fraud_check_done: {type: bool, init: 0}"),
        S,
        ("type mismatch: expected a bool, got number 0",),
        "system_status.fraud_check_done.init",
        "fraud_check_done: {type: bool, init: 0}",
    ),
    Case(
        "action_error_rate_above_one",
        edit(S, "    api: credit_bureau\n", "    api: credit_bureau\n    error_rate: 1.5\n"),
        S,
        ("bad range: error_rate 1.5 must be within [0, 1]",),
        "actions.fetch_credit_report",
        "error_rate: 1.5",
    ),
    Case(
        "profile_error_rate_above_one",
        edit(S, "sms: 0.037}", "sms: 1.5}"),
        S,
        ("bad range: an error rate is a number within [0, 1], got number 1.5",),
        "simulation.profiles.live.error_rates.sms",
        "sms: 1.5}",
    ),
    Case(
        "population_probability_above_one",
        edit(S, "probability: 0.15", "probability: 1.5"),
        S,
        ("bad range: a population shift needs a probability within [0, 1]",),
        "simulation.profiles.live.population[0]",
        "probability: 1.5",
    ),
    Case(
        "jitter_min_above_max",
        edit(S, "latency_jitter_ms: {min: 200, max: 1500}", "latency_jitter_ms: {min: 2000, max: 1500}"),
        S,
        ("bad range: need 0 <= min <= max",),
        "simulation.profiles.live.latency_jitter_ms",
        "latency_jitter_ms: {min: 2000",
    ),
    Case(
        "unknown_profile_key",
        edit(
            S,
            "      latency_jitter_ms: {min: 200, max: 1500}\n",
            "      latency_jitter_ms: {min: 200, max: 1500}\n      latency_ms: 5\n",
        ),
        S,
        (
            "unknown key 'latency_ms'",
            "expected one of ['action_latency_ms', 'description', 'error_rates', 'latency_jitter_ms', 'population']",
        ),
        "simulation.profiles.live.latency_ms",
        "      latency_ms: 5",
    ),
    Case(
        "population_unknown_field",
        edit(
            S,
            "            user_profile.age: {dist: normal, mean: 72",
            "            user_profile.agee: {dist: normal, mean: 72",
        ),
        S,
        ("unknown field 'user_profile.agee'",),
        "simulation.profiles.live.population[0].init",
        "user_profile.agee",
    ),
    Case(
        "unknown_default_profile",
        edit(S, "default_profile: sandbox", "default_profile: staging"),
        S,
        ("unknown profile 'staging'",),
        "default_profile",
        "default_profile: staging",
    ),
    Case(
        "unknown_enum_init",
        edit(S, "      init: pending\n", "      init: waiting\n"),
        S,
        ("unknown enum value 'waiting' (expected one of ['pending', 'approved'",),
        "decision.approval_result.init",
        "init: waiting",
    ),
    Case(
        "unknown_enum_in_categorical_probs",
        edit(S, "unemployed: 0.08, retired: 0.1}", "unemployed: 0.08, retiree: 0.1}"),
        S,
        ("unknown enum value 'retiree' in probs", "expected one of ['salaried', 'self_employed'"),
        "user_profile.employment.init",
        "init: {dist: categorical, probs: {salaried: 0.62",
    ),
    Case(
        "categorical_probs_wrong_length",
        edit(S, "probs: [0.3, 0.25, 0.15, 0.3]", "probs: [0.5, 0.5]"),
        S,
        ("probs needs 4 numbers (one per enum value)",),
        "application.purpose.init",
        "probs: [0.5, 0.5]",
    ),
    Case(
        "enum_without_values",
        edit(S, "values: [home, car, education, consumption]", "values: []"),
        S,
        ("an enum field needs 'values': a non-empty list of names",),
        "application.purpose",
        "values: []",
    ),
    Case(
        "enum_duplicate_values",
        edit(S, "values: [home, car, education, consumption]", "values: [home, car, home]"),
        S,
        ("enum values must be unique",),
        "application.purpose",
        "values: [home, car, home]",
    ),
    Case(
        "categorical_on_a_float",
        edit(S, "init: {dist: normal, mean: 0.35, std: 0.18}", "init: {dist: categorical, probs: [1.0]}"),
        S,
        ("a categorical distribution needs an enum field, not float",),
        "user_profile.debt_ratio.init",
        "init: {dist: categorical, probs: [1.0]}",
    ),
    Case(
        "bernoulli_on_an_int",
        edit(S, "init: {dist: uniform, low: 6, high: 36}", "init: {dist: bernoulli, p: 0.5}"),
        S,
        ("a bernoulli distribution needs a bool field, not int",),
        "application.term_months.init",
        "term_months: {type: int",
    ),
    Case(
        "normal_on_an_enum",
        edit(S, "init: {dist: categorical, probs: [0.3, 0.25, 0.15, 0.3]}", "init: {dist: normal, mean: 1, std: 1}"),
        S,
        ("distribution 'normal' needs an int or float field, not enum",),
        "application.purpose.init",
        "init: {dist: normal, mean: 1, std: 1}",
    ),
    Case(
        "unknown_distribution",
        edit(S, "init: {dist: normal, mean: 40, std: 11}", "init: {dist: gaussian, mean: 40, std: 11}"),
        S,
        (
            "unknown distribution 'gaussian'",
            "expected one of ['bernoulli', 'categorical', 'lognormal', 'normal', 'uniform']",
        ),
        "user_profile.age.init",
        "dist: gaussian",
    ),
    Case(
        "distribution_missing_parameter",
        edit(S, "init: {dist: normal, mean: 40, std: 11}", "init: {dist: normal, mean: 40}"),
        S,
        ("distribution 'normal' needs parameter 'std'",),
        "user_profile.age.init",
        "init: {dist: normal, mean: 40}",
    ),
    Case(
        "field_without_init",
        edit(
            S,
            "approved_amount: {type: float, min: 0, max: 1000000, unit: CNY, init: 0}",
            "approved_amount: {type: float, min: 0, max: 1000000, unit: CNY}",
        ),
        S,
        ("missing 'init'",),
        "decision.approved_amount",
        "approved_amount: {type: float",
    ),
    Case(
        "init_is_empty",
        edit(S, "unit: CNY, init: 0}", "unit: CNY, init: ~}"),
        S,
        ("expected an initial value, a distribution or an expr, got nothing",),
        "decision.approved_amount.init",
        "init: ~}",
    ),
    Case(
        "distribution_unknown_parameter",
        edit(S, "mean: 40, std: 11}", "mean: 40, std: 11, skew: 1}"),
        S,
        ("unknown key 'skew'",),
        "user_profile.age.init.skew",
        "skew: 1",
    ),
    Case(
        "bernoulli_constant_above_one",
        regex(S, r'p: "0\.02 \+ 0\.06[^"]*"', "p: 1.5"),
        S,
        ("bad range: probability p 1.5 must be within [0, 1]",),
        "hidden.is_fraud.init",
        "      init:\n        dist: bernoulli",
    ),
    Case(
        "negative_std",
        edit(S, "mean: 40, std: 11", "mean: 40, std: -11"),
        S,
        ("bad range: std -11 must be >= 0",),
        "user_profile.age.init",
        "std: -11",
    ),
    Case(
        "negative_sigma",
        edit(S, "mean: 9.1, sigma: 0.45", "mean: 9.1, sigma: -0.45"),
        S,
        ("bad range: sigma -0.45 must be >= 0",),
        "user_profile.income_monthly.init",
        "sigma: -0.45",
    ),
    Case(
        "uniform_low_above_high",
        edit(S, "low: 6, high: 36", "low: 36, high: 6"),
        S,
        ("bad range: low 36 is greater than high 6",),
        "application.term_months.init",
        "low: 36",
    ),
    Case(
        "categorical_prob_not_a_number",
        edit(S, "probs: [0.3, 0.25, 0.15, 0.3]", "probs: [0.3, 0.25, 0.15, high]"),
        S,
        ("probs must be non-negative numbers",),
        "application.purpose.init",
        "probs: [0.3, 0.25, 0.15, high]",
    ),
    Case(
        "effect_probability_above_one",
        edit(
            S, "      - set: {decision.notified: true}\n", "      - set: {decision.notified: true}\n        prob: 1.5\n"
        ),
        S,
        ("bad range: probability 1.5 must be within [0, 1]",),
        "actions.send_notification.effects[0].prob",
        "prob: 1.5",
    ),
    Case(
        "effect_unknown_enum_value",
        edit(S, "set: {decision.approval_result: rejected}", "set: {decision.approval_result: refused}"),
        S,
        ("unknown enum value 'refused'", "expected one of ['pending', 'approved'"),
        "actions.reject.effects[0].set.decision.approval_result",
        "decision.approval_result: refused",
    ),
    Case(
        "negative_latency",
        edit(S, "latency_ms: {mean: 300, std: 60}", "latency_ms: {mean: -300, std: 60}"),
        S,
        ("bad range: latency mean and std must be >= 0",),
        "actions.initiate_fraud_check.latency_ms",
        "latency_ms: {mean: -300",
    ),
    Case(
        "human_takeover_not_a_bool",
        edit(S, "human_takeover: true", 'human_takeover: "yes"'),
        S,
        ("type mismatch: 'human_takeover' expects a bool, got string 'yes'",),
        "actions.escalate_to_human.human_takeover",
        'human_takeover: "yes"',
    ),
    Case(
        "api_not_a_string",
        edit(S, "api: sms", "api: [sms]"),
        S,
        ("type mismatch: expected an API name, got a list",),
        "actions.send_notification.api",
        "api: [sms]",
    ),
    Case(
        "error_rate_for_unknown_api",
        edit(S, "sms: 0.037}", "smss: 0.037}"),
        S,
        ("unknown api 'smss'", "APIs of the actions: ['credit_bureau', 'fraud_api', 'sms']"),
        "simulation.profiles.live.error_rates.smss",
        "smss: 0.037}",
    ),
    Case(
        "population_init_out_of_range",
        edit(S, "user_profile.age: {dist: normal, mean: 72, std: 6}", "user_profile.age: 200"),
        S,
        ("bad range: initial value 200 outside [18.0, 90.0]",),
        "simulation.profiles.live.population[0].init.user_profile.age",
        "user_profile.age: 200",
    ),
    Case(
        "population_unknown_enum_in_probs",
        edit(S, "unemployed: 0.05, retired: 0.7}", "unemployed: 0.05, retiree: 0.7}"),
        S,
        ("unknown enum value 'retiree' in probs",),
        "simulation.profiles.live.population[0].init.user_profile.employment",
        "unemployed: 0.05, retiree",
    ),
    Case(
        "unknown_simulation_key",
        edit(S, "simulation:\n  profiles:", "simulation:\n  profile:"),
        S,
        ("unknown key 'profile' (expected one of ['profiles'])",),
        "simulation.profile",
        "  profile:",
    ),
    Case(
        "name_not_a_string",
        edit(S, "name: credit_approval\n", "name: [credit, approval]\n"),
        S,
        ("the scenario name is a string, got a list",),
        "name",
        "name: [credit, approval]",
    ),
    Case(
        "name_with_glob_characters",
        edit(S, "name: credit_approval\n", "name: cred?t_approval\n"),
        S,
        ("the scenario name 'cred?t_approval' is not a scenario name", "ASCII letters, digits, '_' and '-'"),
        "name",
        "name: cred?t_approval",
    ),
    Case(
        "unknown_field_type",
        edit(S, "term_months: {type: int,", "term_months: {type: integer,"),
        S,
        ("unknown field type 'integer'", "expected one of ['int', 'float', 'enum', 'bool']"),
        "application.term_months",
        "type: integer",
    ),
    Case(
        "reserved_episode_group",
        edit(S, "state:\n", "state:\n  episode:\n    n: {type: int, init: 0}\n"),
        S,
        ("'episode' is reserved for built-in episode variables",),
        "episode",
        "  episode:",
    ),
    Case(
        "empty_state",
        regex(S, r"^state:\n.*?(?=^actions:)", "state: {}\n\n"),
        S,
        ("the state declares no fields",),
        "state",
        "state: {}",
    ),
    # ---- actions and rules
    Case(
        "duplicate_action",
        edit(S, "  - name: approve_reduced", "  - name: approve"),
        S,
        ("duplicate action 'approve'",),
        "actions.approve",
        "  - name: approve\n    description: Approve at most",
    ),
    Case(
        "empty_actions",
        regex(S, r"^actions:\n.*?(?=^# The rule engine)", "actions: []\n\n"),
        S,
        ("expected a non-empty list of actions",),
        "actions",
        "actions: []",
    ),
    Case(
        "action_without_name",
        edit(S, "  - name: reject\n", "  - nam: reject\n"),
        S,
        ("unknown key 'nam'",),
        "actions[4].nam",
        "nam: reject",
    ),
    Case(
        "undefined_action_in_rule",
        edit(S, "action: send_notification}", "action: notify}"),
        S,
        ("undefined action 'notify' in a rule", "actions: ['initiate_fraud_check'"),
        "rule_policy[6].action",
        "action: notify}",
    ),
    Case(
        "effect_sets_unknown_field",
        edit(S, "set: {decision.notified: true}", "set: {decision.notifed: true}"),
        S,
        ("unknown field 'decision.notifed'",),
        "actions.send_notification.effects[0].set",
        "decision.notifed",
    ),
    Case(
        "required_field_unknown",
        edit(S, "required_fields: [user_profile.age]", "required_fields: [user_profile.agee]"),
        S,
        ("unknown field 'user_profile.agee'",),
        "actions.initiate_fraud_check.required_fields",
        "required_fields: [user_profile.agee]",
    ),
    Case(
        "required_field_never_observable",
        edit(S, "required_fields: [user_profile.age]", "required_fields: [hidden.is_fraud]"),
        S,
        ("required field 'hidden.is_fraud' is never observable (observed: false)",),
        "actions.initiate_fraud_check.required_fields",
        FRAUD,
    ),
    Case(
        "state_with_no_legal_action",
        edit(
            S,
            "precondition: \"decision.approval_result in ['approved', 'approved_reduced', 'rejected'] and not "
            'decision.notified"',
            'precondition: "false"',
        ),
        S,
        (
            "the action set can leave a state with no legal action",
            "every reachable state needs at least one legal action",
        ),
        "actions",
    ),
    # ---- YAML
    # PyYAML reports the line where it notices the problem: the line after the open bracket.
    Case(
        "invalid_yaml",
        edit(S, "horizon: 10", "horizon: [10"),
        S,
        ("invalid YAML", "expected ',' or ']'"),
        "",
        "history_len: 4",
    ),
    Case(
        "duplicate_key",
        edit(S, "history_len: 4\n", "history_len: 4\nhorizon: 12\n"),
        S,
        ("invalid YAML", "duplicate key 'horizon'"),
        "",
        "horizon: 12",
    ),
    Case(
        "top_level_not_a_mapping",
        regex(S, r"\A.*\Z", "- just\n- a list\n"),
        S,
        ("expected a mapping at the top level, got a list",),
    ),
    Case("missing_scenario_yaml", delete(S), S, ("missing scenario.yaml in the pack",)),
    # ---- rules.yaml
    Case("missing_rules_yaml", delete(R), R, ("missing rules.yaml",)),
    Case(
        "rule_without_title",
        edit(R, "    title: Handling time\n", ""),
        R,
        ("each rule needs at least a 'title'",),
        "rules.OPS_SLA_v3.2_4.1",
        "  OPS_SLA_v3.2_4.1:",
    ),
    Case(
        "rules_not_a_mapping",
        regex(R, r"^rules:.*\Z", "rules: [a, b]\n"),
        R,
        ("expected a mapping 'rules:' of rule id",),
        "rules",
        "rules: [a, b]",
    ),
    # ---- reward modules
    Case(
        "dangling_rule_ref",
        edit(V1, '@rule_ref("CX_v1.0_1.1")', '@rule_ref("CX_v9.9_1.1")'),
        V1,
        ("dangling rule ref 'CX_v9.9_1.1': not defined in rules.yaml",),
        "notified",
        '@component(objective="service"',
    ),
    Case(
        "component_without_rule_ref",
        edit(V1, '@rule_ref("OPS_v2.0_2.2")\n', ""),
        V1,
        ("reward component has no @rule_ref(...)",),
        "human_cost",
        '@component(objective="efficiency", reason="case handed',
    ),
    Case(
        "settle_on_undefined_action",
        edit(V1, 'settle_on="send_notification")', 'settle_on="notify_applicant")'),
        V1,
        ("settle_on names undefined action 'notify_applicant'",),
        "loan_outcome",
        '@component(objective="risk", reason="loan outcome',
    ),
    Case(
        "repeat_penalty_dangling_ref",
        edit(V1, '"rule_ref": "OPS_v2.0_2.3"', '"rule_ref": "OPS_v0_0"'),
        V1,
        ("dangling rule ref 'OPS_v0_0'",),
        "REPEAT_PENALTY",
        "REPEAT_PENALTY =",
    ),
    Case(
        "reward_syntax_error",
        edit(V1, "def human_cost(t):", "def human_cost(t:"),
        V1,
        ("syntax error in reward module",),
        "",
        "def human_cost(t:",
    ),
    Case(
        "reward_import_error",
        edit(V1, "import torch\n", "import torch\nimport not_a_real_module_xyz\n"),
        V1,
        ("reward module failed to import: ModuleNotFoundError", "not_a_real_module_xyz"),
        "",
        "import not_a_real_module_xyz",
    ),
    Case(
        "reward_module_raises",
        edit(V1, 'VERSION_LABEL = "v1"', "VERSION_LABEL = 1 / 0"),
        V1,
        ("reward module failed to import: ZeroDivisionError",),
        "",
        "VERSION_LABEL = 1 / 0",
    ),
    Case(
        "reward_without_components",
        regex(V1, r"^@component.*\Z", "\n"),
        V1,
        ("reward module defines no @component functions",),
    ),
    Case(
        "no_reward_module",
        delete("reward_v0.py", "reward_v1.py"),
        "",
        ("no reward function: expected reward_v<N>.py files in the pack",),
    ),
    Case(
        "weight_schedule_unknown_objective",
        edit(V1, "CLIP = 5.0\n", 'CLIP = 5.0\nWEIGHT_SCHEDULE = [(1000, {"speed": 2.0})]\n'),
        V1,
        ("unknown objective(s) ['speed']",),
        "WEIGHT_SCHEDULE",
        "WEIGHT_SCHEDULE =",
    ),
    Case(
        "weights_unknown_objective",
        edit(V1, 'WEIGHTS = {"compliance": 1.0,', 'WEIGHTS = {"complience": 2.0,'),
        V1,
        ("unknown objective(s) ['complience']", "objectives: ['compliance', 'efficiency', 'risk', 'service']"),
        "WEIGHTS",
        "WEIGHTS =",
    ),
    Case(
        "weights_not_numbers",
        edit(V1, 'WEIGHTS = {"compliance": 1.0,', 'WEIGHTS = {"compliance": "high",'),
        V1,
        ("expected a mapping objective → number",),
        "WEIGHTS",
        "WEIGHTS =",
    ),
    Case(
        "weight_schedule_not_pairs",
        edit(V1, "CLIP = 5.0\n", 'CLIP = 5.0\nWEIGHT_SCHEDULE = {"risk": 2.0}\n'),
        V1,
        ("expected a list of (env step, {objective: weight}) pairs",),
        "WEIGHT_SCHEDULE",
        "WEIGHT_SCHEDULE =",
    ),
    Case(
        "clip_not_positive",
        edit(V1, "CLIP = 5.0", "CLIP = -1"),
        V1,
        ("expected a positive number (the bound on |total|), got -1",),
        "CLIP",
        "CLIP = -1",
    ),
    Case(
        "clip_not_a_number",
        edit(V1, "CLIP = 5.0", 'CLIP = "big"'),
        V1,
        ("expected a positive number",),
        "CLIP",
        'CLIP = "big"',
    ),
    Case(
        "repeat_penalty_without_penalty",
        edit(V1, '"penalty": 0.2, ', ""),
        V1,
        ("expected {'penalty': number >= 0, 'after': int >= 1",),
        "REPEAT_PENALTY",
        "REPEAT_PENALTY =",
    ),
    Case(
        "repeat_penalty_after_not_int",
        edit(V1, '"after": 2', '"after": "twice"'),
        V1,
        ("expected {'penalty': number >= 0, 'after': int >= 1",),
        "REPEAT_PENALTY",
        "REPEAT_PENALTY =",
    ),
]


def _line_number(text: str, marker: str, after: str | None) -> int:
    start = 0 if after is None else text.index(after)
    pos = text.index(marker, start)
    return text.count("\n", 0, pos) + 1


@pytest.fixture
def broken(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Case]:
    case: Case = request.param
    pack = tmp_path / CREDIT.name  # a pack given by path is named by its folder
    shutil.copytree(CREDIT, pack, ignore=shutil.ignore_patterns("__pycache__"))
    case.mutate(pack)
    return pack, case


def _expected_location(pack: Path, case: Case) -> tuple[str, int | None]:
    file = str(pack / case.file) if case.file else str(pack)
    if case.line_of is None:
        return file, None
    return file, _line_number((pack / case.file).read_text(), case.line_of, case.line_after)


@pytest.mark.parametrize("broken", CASES, ids=[c.id for c in CASES], indirect=True)
def test_malformed_pack(broken: tuple[Path, Case], capsys: pytest.CaptureFixture[str]) -> None:
    pack, case = broken
    file, line = _expected_location(pack, case)
    modules_before = {m for m in sys.modules if m.startswith("rlops_reward_")}

    # The loader: one PackError with file, line and path; nothing is returned.
    loaded = None
    with pytest.raises(PackError) as info:
        loaded = load_pack(pack)
    assert loaded is None
    err = info.value
    assert err.file == file
    if line is not None:
        assert err.line == line, f"{case.id}: line {err.line}, expected {line}"
    assert err.path == case.path
    for text in case.expect:
        assert text in err.message, f"{case.id}: {text!r} not in {err.message!r}"
    assert {m for m in sys.modules if m.startswith("rlops_reward_")} <= modules_before, "no module left behind"

    # The CLI: exit code 2, one line on stderr, no traceback.
    capsys.readouterr()
    rc = main(["env", "validate", "--scenario", str(pack)])
    out, stderr = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    msg = lines[0]
    location = file if line is None else f"{file}:{line}"
    assert msg.startswith(f"error: {location}: "), msg
    if case.path:
        assert msg.endswith(f" at {case.path}"), msg
    for text in case.expect:
        assert text in msg


def test_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def test_pack_folder_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["env", "validate", "--scenario", str(tmp_path / "nope")])
    assert rc == 2
    assert "scenario pack folder not found" in capsys.readouterr().err


def test_cli_subprocess_reports_without_traceback(tmp_path: Path) -> None:
    pack = tmp_path / CREDIT.name  # a pack given by path is named by its folder
    shutil.copytree(CREDIT, pack, ignore=shutil.ignore_patterns("__pycache__"))
    edit(S, "terminal: decision.notified", "terminal: \"__import__('os')\"")(pack)
    proc = subprocess.run(
        [sys.executable, "-m", "rlops.cli", "env", "validate", "--scenario", str(pack)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    line = _line_number((pack / S).read_text(), NOTIFY, None)
    assert proc.stderr.strip() == (
        f"error: {pack / S}:{line}: illegal expression: function '__import__' is not allowed in expression "
        f"\"__import__('os')\" at actions.send_notification.terminal"
    )

"""Reward governance: does the reward function reward what a rule forbids?

Each constraint of ``rules.yaml`` (see :mod:`rlops.sandbox.constraints`) is checked on the stress
test's edge states: every action is stepped on every state (masked ones as no-ops, which are not
judged), the transitions that break the constraint are found with the compiled expression, and the
reward components that cite the rule (``@rule_ref``) are read off the breakdown. A component that
pays a *positive* score on a transition that breaks its own rule rewards the violation: the stress
test fails and names the rule. A constraint whose rule no component cites cannot be judged and is
reported as uncovered.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from rlops.pipeline_steps.stress.checks import Finding, _SettleEveryStep
from rlops.pipeline_steps.stress.edge_states import describe_state
from rlops.sandbox.constraints import RuleConstraint, parse_constraints, transition_matrix
from rlops.sandbox.env import BatchedEnv, NoLegalActionError
from rlops.sandbox.pack import Pack
from rlops.sandbox.reward import RewardFunction

Tensor = torch.Tensor


@dataclass(frozen=True)
class ConstraintResult:
    """How one constraint fared on the edge states (all actions together)."""

    rule: str
    constraint: str
    components: tuple[str, ...]
    judged: int
    violations: int
    rewarded: int
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Recorder(_SettleEveryStep):
    """Also keeps the states after the action and the executed action codes."""

    after: Tensor | None = None
    codes: Tensor | None = None

    def compute(
        self, t: Any, actions: Tensor, repeat_count: Tensor, done: Tensor, global_step: int
    ) -> tuple[Tensor, Tensor]:
        self.after, self.codes = t.ns._S.clone(), t.action.codes.clone()
        return super().compute(t, actions, repeat_count, done, global_step)


def step_transitions(pack: Pack, fn: RewardFunction, S: Tensor, action: int) -> tuple[Tensor, Tensor, list[str]]:
    """Step ``action`` on every row of ``S``: ``(transition matrix, breakdown, component names)``."""
    n = S.shape[0]
    env = BatchedEnv(pack.scenario, fn, num_envs=n, illegal_action="noop")
    rec = _Recorder(fn, n, env.device, env.action_names, env.role_names)
    env.reward = rec
    hist = torch.zeros((n, pack.scenario.layout.history_len), dtype=torch.long)
    hist[:, -1] = S[:, pack.scenario.columns["episode.last_action"]].long()
    env.load_state_dict(
        {
            "S": S.clone(),
            "seeds": torch.arange(n),
            "episodes": torch.zeros(n, dtype=torch.long),
            "history": hist,
            "ep_return": torch.zeros(n),
            "pending": rec.pending.clone(),
            "global_step": torch.tensor(0),
        }
    )
    try:
        env.step(torch.full((n,), action, dtype=torch.long))
    except NoLegalActionError:
        pass  # the rewards of the step were computed; dead ends are the scenario checks' concern
    assert rec.last is not None and rec.after is not None and rec.codes is not None
    return transition_matrix(S, rec.after, rec.codes), rec.last[1], rec.names


def check_constraints(
    pack: Pack, fn: RewardFunction, S: Tensor, constraints: list[RuleConstraint] | None = None
) -> tuple[list[ConstraintResult], list[Finding]]:
    """Judge every constraint on every action stepped on ``S``."""
    if constraints is None:
        constraints = parse_constraints(pack.rules, pack.scenario, str(pack.path / "rules.yaml"))
    if not constraints:
        return [], []
    names_by_rule: dict[str, list[int]] = {}
    for j, component in enumerate(fn.components):
        names_by_rule.setdefault(component.rule_ref, []).append(j)
    acc = {id(c): [0, 0, 0] for c in constraints}  # judged, violations, rewarded
    findings: list[Finding] = []
    for a, action in enumerate(pack.scenario.action_names):
        X, bd, names = step_transitions(pack, fn, S, a)
        executed = X[:, -1] >= 0
        for c in constraints:
            cols = names_by_rule.get(c.rule, [])
            broken = executed & c.violated(X, pack.scenario.action_names)
            acc[id(c)][0] += int(executed.sum())
            acc[id(c)][1] += int(broken.sum())
            for j in cols:
                paid = broken & (bd[:, j] > 1e-9)
                if not bool(paid.any()):
                    continue
                acc[id(c)][2] += int(paid.sum())
                i = int(paid.nonzero()[0, 0])
                comp = names[j]
                findings.append(
                    Finding(
                        "rule_violation_rewarded",
                        action,
                        "nominal",
                        int(paid.sum()),
                        f"reward component '{comp}' pays +{float(bd[paid, j].max()):.3g} for breaking rule {c.rule} "
                        f"({c.title}: {c.source}) on {int(paid.sum())} of {int(broken.sum())} edge states where action "
                        f"'{action}' breaks it",
                        comp,
                        describe_state(pack, S[i]),
                    )
                )
    results = []
    for c in constraints:
        judged, viol, rewarded = acc[id(c)]
        comps = tuple(fn.components[j].name for j in names_by_rule.get(c.rule, []))
        results.append(ConstraintResult(c.rule, c.source, comps, judged, viol, rewarded, rewarded == 0))
    return results, findings


__all__ = ["ConstraintResult", "check_constraints", "step_transitions"]

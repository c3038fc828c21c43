"""Policy identity: which policy a user, a trace row or a tag means — parsed and validated here only.

Every command, DAG conf, trace row and tag names a policy one of these ways, and all of them mean
the same thing everywhere:

    2  /  v2                          version 2 of the scenario's ``<scenario>-policy``
    credit_approval-policy/2          the same, fully qualified (what trace rows record)
    models:/credit_approval-policy/2  the same, as an MLflow model URI
    champion | challenger | previous  an alias of the scenario's registered policy
    credit_approval-policy@champion   the same, fully qualified
    rules                             the pack's rule engine (traffic served before any champion)

An alias is resolved to a version by the registry (``rlops.pipeline_steps.infra.policy_loader``); the
canonical text of a resolved policy is ``<scenario>-policy/<version>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlops.common.errors import UserError

ALIASES = ("champion", "challenger", "previous")
RULES = "rules"
_SCENARIO = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
_QUALIFIED = re.compile(rf"^(?:models:/)?({_SCENARIO})-policy(?:/v?(\d{{1,9}})|@([a-z]+))$")
_BARE = re.compile(r"^v?(\d{1,9})$")


def policy_model_name(scenario: str) -> str:
    """The registered model of a scenario's policies."""
    return f"{scenario}-policy"


@dataclass(frozen=True)
class PolicyRef:
    """One policy: a registry version or alias of a scenario's policy, or the rule engine."""

    scenario: str | None
    version: str | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str | int | PolicyRef, scenario: str | None = None) -> PolicyRef:
        """Any of the forms in the module docstring; ``scenario`` fills in a bare version or
        alias and must agree with a qualified one."""
        if isinstance(text, PolicyRef):
            return text if text.scenario or scenario is None else cls(scenario, text.version, text.alias)
        raw = str(text).strip()
        if raw == RULES:
            return cls(scenario, alias=RULES)
        m = _BARE.match(raw)
        if m:
            return cls(scenario, version=str(int(m.group(1))))
        if raw in ALIASES:
            return cls(scenario, alias=raw)
        m = _QUALIFIED.match(raw)
        if not m or (m.group(3) and m.group(3) not in ALIASES):
            raise UserError(
                f"policy {raw!r}: expected a version (2), <scenario>-policy/<version>, an alias "
                f"({', '.join(ALIASES)}), <scenario>-policy@<alias> or '{RULES}'"
            )
        if scenario is not None and m.group(1) != scenario:
            raise UserError(f"policy {raw!r} belongs to scenario {m.group(1)!r}, not {scenario!r}")
        return cls(m.group(1), version=str(int(m.group(2))) if m.group(2) else None, alias=m.group(3))

    @property
    def is_rules(self) -> bool:
        return self.alias == RULES

    @property
    def model_name(self) -> str:
        if self.scenario is None:
            raise UserError(f"policy {self}: the scenario is needed to find it in the registry")
        return policy_model_name(self.scenario)

    def resolved(self, version: str) -> PolicyRef:
        return PolicyRef(self.scenario, version=str(int(version)))

    def __str__(self) -> str:
        if self.is_rules:
            return RULES
        tail = f"/{self.version}" if self.version is not None else f"@{self.alias}"
        return f"{policy_model_name(self.scenario)}{tail}" if self.scenario else (self.version or str(self.alias))


def canonical_policy(text: str | int | PolicyRef, scenario: str | None = None) -> str:
    """The canonical text of a policy reference (``credit_approval-policy/2``); for comparing
    what a user typed with what trace rows and tags record."""
    return str(PolicyRef.parse(text, scenario))

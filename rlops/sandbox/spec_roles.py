"""Parsing of the optional ``roles:`` section of ``scenario.yaml``: several agents in one scenario.

Each role owns a set of actions and says when it is its turn::

    roles:
      - name: screener
        actions: [request_documents, pass_to_underwriting, reject_application]
        acts_when: "application.stage == 'intake'"
      - name: underwriter
        actions: [approve, approve_reduced, decline]     # no acts_when: whenever no role above acts

Every action belongs to exactly one role; the first role whose ``acts_when`` holds acts, and only
the last role may leave ``acts_when`` out. The expressions are compiled by :mod:`rlops.sandbox.compile`.
"""

from __future__ import annotations

from typing import Any

from rlops.sandbox.spec_fields import _Ctx, _kind, _line
from rlops.sandbox.spec_types import MAX_ROLES, RoleSpec

_ROLE_KEYS = {"name", "description", "actions", "acts_when"}


def parse_roles(c: _Ctx, doc: dict[Any, Any], action_names: list[str]) -> tuple[RoleSpec, ...]:
    """The roles of a scenario (empty when it has no ``roles:``): a one-paragraph
    :class:`~rlops.sandbox.errors.PackError` with file and line on any mistake."""
    if "roles" not in doc:
        return ()
    node = doc["roles"]
    if not isinstance(node, list) or len(node) < 2:
        got = f"{len(node)} role(s)" if isinstance(node, list) else _kind(node)
        raise c.err(
            doc,
            "roles",
            "roles",
            "expected a list of at least two roles, each {name, actions, acts_when} "
            f"(a scenario with one agent has no roles: block), got {got}",
        )
    if len(node) > MAX_ROLES:
        raise c.err(doc, "roles", "roles", f"{len(node)} roles, over the limit of {MAX_ROLES}")
    roles: list[RoleSpec] = []
    owner: dict[str, str] = {}
    for i, r in enumerate(node):
        roles.append(_parse_role(c, r, node, i, action_names, owner, last=i == len(node) - 1))
    names = [r.name for r in roles]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        k = names.index(dup, names.index(dup) + 1)
        raise c.err(node, k, f"roles.{dup}", f"duplicate role '{dup}'")
    unowned = [a for a in action_names if a not in owner]
    if unowned:
        raise c.err(
            doc,
            "roles",
            "roles",
            f"action(s) {unowned} belong to no role; with roles: every action "
            "is listed under exactly one role's actions",
        )
    return tuple(roles)


def _parse_role(
    c: _Ctx, r: Any, parent: list[Any], i: int, action_names: list[str], owner: dict[str, str], last: bool
) -> RoleSpec:
    where = f"roles[{i}]"
    r = c.mapping(r, parent, i, where)
    c.check_keys(r, _ROLE_KEYS, where)
    name = r.get("name")
    if not isinstance(name, str) or not name.isidentifier() or name == "team":
        raise c.err(
            r,
            "name" if "name" in r else None,
            where,
            "each role needs a 'name' (an identifier other than 'team', the name of the shared reward)",
        )
    where = f"roles.{name}"
    acts = r.get("actions")
    if not isinstance(acts, list) or not acts:
        raise c.err(
            r,
            "actions" if "actions" in r else None,
            f"{where}.actions",
            f"expected a non-empty list of the actions this role takes, got {_kind(acts)}",
        )
    for j, a in enumerate(acts):
        if not isinstance(a, str) or a not in action_names:
            raise c.err(acts, j, f"{where}.actions", f"undefined action '{a}' (actions: {action_names})")
        if a in owner:
            raise c.err(
                acts,
                j,
                f"{where}.actions",
                f"action '{a}' already belongs to role '{owner[a]}'; an action belongs to exactly one role",
            )
        owner[a] = name
    when = r.get("acts_when")
    if when is None and not last:
        raise c.err(
            r,
            None,
            f"{where}.acts_when",
            "only the last role may leave out 'acts_when' (it then acts "
            "whenever no role before it does); give this role a condition",
        )
    if when is not None and not isinstance(when, (str, bool)):
        raise c.err(
            r,
            "acts_when",
            f"{where}.acts_when",
            f"type mismatch: acts_when expects a condition (an expression), got {_kind(when)}",
        )
    return RoleSpec(
        name=name, description=str(r.get("description", "")), actions=tuple(acts), acts_when=when, line=_line(parent, i)
    )


__all__ = ["parse_roles"]

"""The trace contract as a JSON Schema of one landing-zone line: what a team that logs decisions
outside rlops (or imports a log with ``rlops import``) writes, column by column. ``rlops env
schema --scenario NAME`` prints it; ``docs/reference/trace-schema.md`` lists the columns every
pack shares."""

from __future__ import annotations

from typing import Any

from rlops.data_contracts.schema import ColumnSpec, Contract

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_TYPES: dict[str, Any] = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "timestamp": "string",
    "json": ["object", "array", "string"],
    "mask": "string",
}


def column_schema(spec: ColumnSpec) -> dict[str, Any]:
    """The JSON Schema of one column's value (null allowed where the column is optional)."""
    kind = _TYPES[spec.kind]
    kinds = list(kind) if isinstance(kind, list) else [kind]
    if spec.true_text is not None:
        kinds.append("boolean")
    if not spec.required:
        kinds.append("null")
    out: dict[str, Any] = {"type": kinds[0] if len(kinds) == 1 else kinds}
    if spec.description:
        out["description"] = spec.description
    if spec.kind == "timestamp":
        out["format"] = "date-time"
    if spec.values is not None:
        out["enum"] = [*spec.values, *([None] if not spec.required else [])]
    if spec.min is not None:
        out["minimum"] = spec.min
    if spec.max is not None:
        out["maximum"] = spec.max
    if spec.regex:
        out["pattern"] = spec.regex
    if spec.length is not None:
        out["minLength"] = out["maxLength"] = spec.length
    elif spec.min_length is not None:
        out["minLength"] = spec.min_length
    return out


def contract_json_schema(contract: Contract) -> dict[str, Any]:
    """One landing-zone line of ``contract``: every column a property (state fields as flat
    ``state.<path>`` keys; a nested ``state`` object is accepted too and flattened), the required
    ones required; other keys are kept in the row's ``extra``."""
    return {
        "$schema": DRAFT,
        "title": f"{contract.name}: one decision (a trace row) as a JSON object",
        "type": "object",
        "properties": {c.name: column_schema(c) for c in contract.columns},
        "required": contract.required_columns,
        "additionalProperties": True,
    }

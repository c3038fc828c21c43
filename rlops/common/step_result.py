"""The shape of a step's result: a frozen dataclass whose fields are the result's names and types
(no ``dict[str, Any]`` to spell keys against), with :meth:`StepResult.as_dict` for what leaves the
process — the JSON a command prints (``--json``), the XCom a DAG task pushes."""

from __future__ import annotations

import dataclasses
from typing import Any


class StepResult:
    """Base of a step's frozen result dataclass: :meth:`as_dict` gives its JSON-able fields."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (nested records too), for JSON output and XCom."""
        out: dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]  # subclasses are dataclasses
        return out


__all__ = ["StepResult"]

"""Errors raised while loading a scenario pack: each one names the file, the line, the field path
and what was expected, so the author can fix the pack without reading a traceback."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.errors import UserError


@dataclass
class PackError(UserError):
    """A scenario pack that cannot be loaded. Nothing of the pack is returned when this is raised."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        at = f" at {self.path}" if self.path else ""
        # One line, always: a message may quote an exception of the pack's own code.
        return " ".join(f"{where}: {self.message}{at}".split("\n"))


class ExprError(ValueError):
    """An expression outside the whitelist, or of the wrong type. Re-raised as :class:`PackError`
    with the location of the YAML value that holds the expression."""

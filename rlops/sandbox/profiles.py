"""Which simulation profile a run uses when none is named — one rule for every step.

A pack simulates two worlds. The *production stand-in* (``live``, scripted by its own population
shifts and simulation block, and by a timeline's events) is what the pipeline observes, as it would
observe real traffic; nothing the pipeline does ever edits it. The *calibrated sandbox*
(``calibrated``, written by recalibration from what was observed) is where policies are trained,
stress-tested and evaluated, and what drift is measured against. Before the first calibration the
sandbox is the pack's ``default_profile``; a pack with no ``live`` profile stands in for production
with its default profile too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from rlops.common.errors import UserError

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack

LIVE = "live"
CALIBRATED = "calibrated"
Role = Literal["production", "sandbox"]


def default_profile(pack: Pack, role: Role, configured: str | None = None) -> str:
    """``configured`` when given (it must exist), else the profile that plays ``role``."""
    profiles = pack.scenario.profiles
    if configured:
        if configured not in profiles:
            raise UserError(f"profile {configured!r}: pack {pack.name} has {', '.join(sorted(profiles))}")
        return configured
    preferred = LIVE if role == "production" else CALIBRATED
    return preferred if preferred in profiles else pack.scenario.spec.default_profile

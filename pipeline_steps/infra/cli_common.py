"""Command-line and HTML helpers shared by the quality steps (stress test, label queue,
recalibration, replay/audit). Light on purpose: ``rlops --help`` imports every step module, so
nothing here (or at the top of those modules) pulls in numpy, pandas or torch."""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline_steps.infra.context import StepContext


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", help="scenario name under scenarios/, or a pack folder")
    p.add_argument("--run-key", help="data interval key, e.g. 20261130T0500 (default: now)")
    p.add_argument("--dry-run", action="store_true", help="compute and print, write nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def context_from_args(args: argparse.Namespace) -> "StepContext":
    """A :class:`StepContext` from ``--scenario`` (a name or a pack folder), ``--run-key`` and
    ``--dry-run``; a malformed run key is a user error (exit 2)."""
    from pipeline_steps.infra.context import StepContext
    from common.errors import UserError
    from common.config import load_params
    params = load_params()
    scenario = getattr(args, "scenario", None)
    if scenario and Path(scenario).is_dir():
        folder = Path(scenario).resolve()
        params["scenarios_dir"], scenario = str(folder.parent), folder.name
    try:
        return StepContext.create(scenario=scenario, run_key=getattr(args, "run_key", None),
                                  dry_run=bool(getattr(args, "dry_run", False)), params=params)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def png_base64(fig: Any) -> str:
    """A matplotlib figure as base64 PNG, to embed in a page as ``data:image/png;base64,…``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def html_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], classes: dict[int, str] | None = None) -> str:
    """A plain HTML table; ``classes`` gives a CSS class per row index (``fail``, ``warn``, ``pass``)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for i, r in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and i in classes else ""
        cells = "".join(f"<td>{html.escape(fmt(r.get(c)))}</td>" for c in columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def html_page(title: str, body: str) -> str:
    """One self-contained page (inline CSS, no external resources)."""
    style = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}"
             "th{background:#f3f3f3}tr.fail td{background:#fde2e2}tr.warn td{background:#fff4d6}"
             "tr.pass td{background:#e6f4e6}.verdict{font-size:20px;font-weight:bold}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def fmt(v: Any) -> str:
    """A table cell: 4 significant digits for floats, a dash for missing values."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return "—" if not math.isfinite(v) else f"{v:.4g}"
    return str(v)

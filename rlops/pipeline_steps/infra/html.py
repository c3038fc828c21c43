"""HTML helpers shared by the report-writing steps (stress test, replay/audit): self-contained
pages, plain tables, embedded matplotlib figures. Standard library only."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from typing import Any


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
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}"
        "th{background:#f3f3f3}tr.fail td{background:#fde2e2}tr.warn td{background:#fff4d6}"
        "tr.pass td{background:#e6f4e6}.verdict{font-size:20px;font-weight:bold}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def fmt(v: Any) -> str:
    """A table cell: 4 significant digits for floats, a dash for missing values."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return "—" if not math.isfinite(v) else f"{v:.4g}"
    return str(v)

"""The gate table as its readers see it: a frame (``gates.json``), a standalone HTML page
(``gates.html``) and the ``Gates:`` paragraph of a version's description in the MLflow UI.

Every row's state is read through :func:`~rlops.pipeline_steps.promotion.gates.gate_state`, so each
surface says ``pass``, ``fail`` or ``skipped`` alike.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from rlops.pipeline_steps.promotion.gates import SKIPPED, Gate, failing_gates, gate_state


def gate_frame(gates: list[Gate]) -> pd.DataFrame:
    return pd.DataFrame(
        [g.to_dict() for g in gates],
        columns=["gate", "candidate", "champion", "threshold", "passed", "status", "detail"],
    )


def gate_table_html(gates: list[Gate], title: str, facts: Mapping[str, Any]) -> str:
    """A standalone HTML page: the facts of the comparison and the gate table."""
    rows = []
    for g in gates:
        d = g.to_dict()
        color = "#eeeeee" if g.skipped else ("#e6f4ea" if g.passed else "#fce8e6")
        cells = "".join(
            f"<td>{html.escape('' if d[k] is None else str(d[k]))}</td>"
            for k in ("gate", "candidate", "champion", "threshold")
        )
        rows.append(f"<tr style='background:{color}'>{cells}<td>{g.status}</td><td>{html.escape(g.detail)}</td></tr>")
    info = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in facts.items())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}td,th{padding:4px 8px;border:1px solid #ccc}"
        "table{border-collapse:collapse}</style></head>"
        f"<body><h1>{html.escape(title)}</h1><ul>{info}</ul><table><tr><th>gate</th><th>candidate</th>"
        "<th>champion</th><th>threshold</th><th>result</th><th>detail</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )


def with_gate_summary(description: str, report: dict[str, Any]) -> str:
    """The version description with its ``Gates:`` paragraph replaced by this evaluation's verdict:
    one line per gate, its state exactly ``pass``, ``fail`` or ``skipped`` (with why it was skipped)."""
    head = re.split(r"(?:^|\n\n)Gates[ :(]", description, maxsplit=1)[0].rstrip()
    failed = failing_gates(report["gates"]) if report.get("gates") else list(report["failed_gates"])
    skipped = [g["gate"] for g in report["gates"] if gate_state(g) == SKIPPED]
    verdict = "all passed" if not failed else f"FAILED {', '.join(failed)}"
    if skipped:
        verdict += f" ({len(skipped)} skipped: {', '.join(skipped)})"
    lines = [
        f"Gates ({report['run_key']}, vs {report['baseline']}, {report['episodes']} episodes, "
        f"{report['profile']} profile): {verdict}."
    ]
    for g in report["gates"]:
        state = gate_state(g)
        why = str(g.get("detail") or "") if state == SKIPPED else ""
        lines.append(f"- {g['gate']}: {state} ({g['threshold']}{'; ' + why if why else ''})")
    return (head + "\n\n" if head else "") + "\n".join(lines)


__all__ = ["gate_frame", "gate_table_html", "with_gate_summary"]

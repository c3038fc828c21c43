"""Inline SVG laid out on the server: the decision map and small sparklines."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from rlops.console import aggregates as agg

WIDTH, HEIGHT = 880, 460
LABELLED_EDGES = 10  # the busiest transitions carry their action's name; the others show it on hover


def decision_map(view: dict[str, Any]) -> str:
    """Nodes (size = traffic, colour = low-reward rate) and the top transitions between them."""
    nodes = view["nodes"]
    pos = agg.layout(nodes, WIDTH, HEIGHT)
    end = (WIDTH - 45.0, HEIGHT / 2, 12.0)
    biggest = max((e["count"] for e in view["edges"]), default=1)
    labelled = sorted(e["count"] for e in view["edges"])[-LABELLED_EDGES:][:1] or [0]
    parts = [f'<svg id="decision-map" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             'aria-label="decision map: state clusters and the actions between them">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#778"/></marker></defs>']
    for e in view["edges"]:
        src, dst = pos.get(e["source"]), pos.get(e["target"], end) if e["target"] != agg.END else end
        if src is None or dst is None:
            continue
        parts.append(_edge(src, dst, e, 0.6 + 4.5 * e["count"] / biggest, e["count"] >= labelled[0]))
    parts.append(f'<g class="end-node"><circle cx="{end[0]}" cy="{end[1]}" r="{end[2]}" fill="#ccd"/>'
                 f'<text x="{end[0]}" y="{end[1] + 26}" text-anchor="middle">end</text></g>')
    for n in nodes:
        x, y, r = pos[n["cluster"]]
        label = f"cluster {n['cluster']}: {n['steps']:,} steps, {n['low_rate']:.0%} low-reward, " \
                f"{n['failure_rate']:.0%} errors"
        parts.append(f'<g class="node" tabindex="0" role="button" data-cluster="{n["cluster"]}" '
                     f'data-steps="{n["steps"]}" data-low-steps="{n["low_steps"]}" data-low-rate="{n["low_rate"]:.4f}">'
                     f'<title>{escape(label)}</title>'
                     f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{agg.colour(n["low_rate"])}"/>'
                     f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" class="node-label">{n["cluster"]}</text>'
                     '</g>')
    parts.append("</svg>")
    return "".join(parts)


def _edge(src: tuple[float, float, float], dst: tuple[float, float, float], e: dict[str, Any], width: float,
          label: bool) -> str:
    (x1, y1, r1), (x2, y2, r2) = src, dst
    title = escape(f"{e['action']}: {e['count']:,} steps from cluster {e['source']} to "
                   + ("the end" if e["target"] == agg.END else f"cluster {e['target']}"))
    if e["source"] == e["target"]:  # a self-loop above the node
        path = f"M {x1 - r1 * 0.6:.1f} {y1 - r1 * 0.8:.1f} C {x1 - r1 - 24:.1f} {y1 - r1 - 40:.1f} " \
               f"{x1 + r1 + 24:.1f} {y1 - r1 - 40:.1f} {x1 + r1 * 0.6:.1f} {y1 - r1 * 0.8:.1f}"
        mx, my = x1, y1 - r1 - 30
    else:
        d = math.hypot(x2 - x1, y2 - y1) or 1.0
        ux, uy = (x2 - x1) / d, (y2 - y1) / d
        sx, sy, tx, ty = x1 + ux * r1, y1 + uy * r1, x2 - ux * (r2 + 2), y2 - uy * (r2 + 2)
        cx, cy = (sx + tx) / 2 - uy * 0.15 * d, (sy + ty) / 2 + ux * 0.15 * d  # bend so pairs do not overlap
        path = f"M {sx:.1f} {sy:.1f} Q {cx:.1f} {cy:.1f} {tx:.1f} {ty:.1f}"
        mx, my = (sx + 2 * cx + tx) / 4, (sy + 2 * cy + ty) / 4
    return (f'<g class="edge"><title>{title}</title><path d="{path}" stroke-width="{width:.2f}" '
            f'marker-end="url(#arrow)"/>'
            + (f'<text x="{mx:.1f}" y="{my:.1f}" class="edge-label">{escape(e["action"])}</text>' if label else "")
            + "</g>")


def sparkline(values: list[float | None], width: int = 120, height: int = 24) -> str:
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    if not pts:
        return ""
    hi = max(v for _, v in pts) or 1.0
    n = max(len(values) - 1, 1)
    coords = " ".join(f"{2 + i * (width - 4) / n:.1f},{height - 2 - (v / hi) * (height - 4):.1f}" for i, v in pts)
    last_x, last_y = coords.split(" ")[-1].split(",")
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'<polyline points="{coords}" fill="none" stroke="#4c72b0" stroke-width="1.5"/>'
            f'<circle cx="{last_x}" cy="{last_y}" r="2.2" fill="#4c72b0"/></svg>')

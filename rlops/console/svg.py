"""Inline SVG laid out on the server: the decision map and small sparklines."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from rlops.console import aggregates as agg

WIDTH, HEIGHT = 880, 460
LABELLED_EDGES = 10  # the busiest transitions carry their action's name; the others show it on hover


Box = tuple[float, float, float, float]  # x0, y0, x1, y1
CHAR_W, LINE_H = 6.3, 13.0  # the edge-label font (11px sans-serif): width per character, line height
NAME_CHARS = 28


def text_box(x: float, y: float, text: str) -> Box:
    """The box a centred label at baseline ``y`` covers."""
    w = CHAR_W * len(text) + 4
    return (x - w / 2, y - LINE_H + 3, x + w / 2, y + 3)


def name_spot(x: float, y: float, r: float, name: str) -> tuple[float, float]:
    """Where a node's name goes: centred under its circle, moved in from the map's edges so that a
    node near a border keeps its whole name inside the picture (the SVG clips what lies outside)."""
    half = (CHAR_W * len(name) + 4) / 2
    return min(max(x, half), WIDTH - half), min(y + r + 13, HEIGHT - 3)


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def short(text: str, n: int = NAME_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip(" ,") + "…"


def decision_map(view: dict[str, Any]) -> str:
    """Nodes (size = traffic, colour = low-reward rate, named by their dominant state features) and
    the top transitions between them; edge labels are placed where they overlap no other label,
    node or node name (a label that fits nowhere is left to the edge's hover title)."""
    nodes = view["nodes"]
    pos = agg.layout(nodes, WIDTH, HEIGHT)
    end = (WIDTH - 45.0, HEIGHT / 2, 12.0)
    biggest = max((e["count"] for e in view["edges"]), default=1)
    labelled = sorted(e["count"] for e in view["edges"])[-LABELLED_EDGES:][:1] or [0]
    taken: list[Box] = [(x - r, y - r, x + r, y + r) for x, y, r in [*pos.values(), end]]
    names = []
    for n in nodes:
        x, y, r = pos[n["cluster"]]
        name = short(str(n.get("name") or f"cluster {n['cluster']}"))
        box = text_box(*name_spot(x, y, r, name), name)
        taken.append(box)
        names.append((n, name, box))
    parts = [
        f'<svg id="decision-map" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        'aria-label="decision map: state clusters and the actions between them">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
        'markerWidth="10" markerHeight="10" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#778"/></marker></defs>',
    ]
    for e in sorted(view["edges"], key=lambda e: -e["count"]):  # the busiest edges pick their label spot first
        src, dst = pos.get(e["source"]), pos.get(e["target"], end) if e["target"] != agg.END else end
        if src is None or dst is None:
            continue
        parts.append(_edge(src, dst, e, 0.6 + 4.5 * e["count"] / biggest, e["count"] >= labelled[0], taken))
    parts.append(
        f'<g class="end-node"><circle cx="{end[0]}" cy="{end[1]}" r="{end[2]}" fill="#ccd"/>'
        f'<text x="{end[0]}" y="{end[1] + 26}" text-anchor="middle">end</text></g>'
    )
    for n, name, _ in names:
        x, y, r = pos[n["cluster"]]
        nx, ny = name_spot(x, y, r, name)
        label = (
            f"cluster {n['cluster']} ({n.get('name') or 'unnamed'}): {n['steps']:,} steps, "
            f"{n['low_rate']:.0%} low-reward, {n['failure_rate']:.0%} errors"
        )
        parts.append(
            f'<g class="node" tabindex="0" role="button" data-cluster="{n["cluster"]}" '
            f'data-name="{escape(str(n.get("name") or ""))}" '
            f'data-steps="{n["steps"]}" data-low-steps="{n["low_steps"]}" data-low-rate="{n["low_rate"]:.4f}">'
            f"<title>{escape(label)}</title>"
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{agg.colour(n["low_rate"])}"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" class="node-label">{n["cluster"]}</text>'
            f'<text x="{nx:.1f}" y="{ny:.1f}" text-anchor="middle" class="node-name">'
            f"{escape(name)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _label_spot(candidates: list[tuple[float, float]], text: str, taken: list[Box]) -> tuple[float, float] | None:
    for x, y in candidates:
        box = text_box(x, y, text)
        if box[0] < 0 or box[2] > WIDTH or box[1] < 0 or box[3] > HEIGHT:
            continue
        if not any(overlaps(box, t) for t in taken):
            taken.append(box)
            return x, y
    return None


def _edge(
    src: tuple[float, float, float],
    dst: tuple[float, float, float],
    e: dict[str, Any],
    width: float,
    label: bool,
    taken: list[Box],
) -> str:
    (x1, y1, r1), (x2, y2, r2) = src, dst
    title = escape(
        f"{e['action']}: {e['count']:,} steps from cluster {e['source']} to "
        + ("the end" if e["target"] == agg.END else f"cluster {e['target']}")
    )
    if e["source"] == e["target"]:  # a self-loop above the node
        path = (
            f"M {x1 - r1 * 0.6:.1f} {y1 - r1 * 0.8:.1f} C {x1 - r1 - 24:.1f} {y1 - r1 - 40:.1f} "
            f"{x1 + r1 + 24:.1f} {y1 - r1 - 40:.1f} {x1 + r1 * 0.6:.1f} {y1 - r1 * 0.8:.1f}"
        )
        spots = [(x1, y1 - r1 - 30 + dy) for dy in (0, -12, 12, -24)]
    else:
        d = math.hypot(x2 - x1, y2 - y1) or 1.0
        ux, uy = (x2 - x1) / d, (y2 - y1) / d
        sx, sy, tx, ty = x1 + ux * r1, y1 + uy * r1, x2 - ux * (r2 + 2), y2 - uy * (r2 + 2)
        cx, cy = (sx + tx) / 2 - uy * 0.15 * d, (sy + ty) / 2 + ux * 0.15 * d  # bend so pairs do not overlap
        path = f"M {sx:.1f} {sy:.1f} Q {cx:.1f} {cy:.1f} {tx:.1f} {ty:.1f}"

        def at(t: float) -> tuple[float, float]:
            return (
                (1 - t) ** 2 * sx + 2 * t * (1 - t) * cx + t * t * tx,
                (1 - t) ** 2 * sy + 2 * t * (1 - t) * cy + t * t * ty,
            )

        spots = [
            (x + 0.0, y + dy) for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8) for x, y in [at(t)] for dy in (0, -11, 11)
        ]
    spot = _label_spot(spots, e["action"], taken) if label else None
    return (
        f'<g class="edge"><title>{title}</title><path d="{path}" stroke-width="{width:.2f}" '
        f'marker-end="url(#arrow)"/>'
        + (f'<text x="{spot[0]:.1f}" y="{spot[1]:.1f}" class="edge-label">{escape(e["action"])}</text>' if spot else "")
        + "</g>"
    )


def sparkline(values: list[float | None], width: int = 120, height: int = 24) -> str:
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    if not pts:
        return ""
    hi = max(v for _, v in pts) or 1.0
    n = max(len(values) - 1, 1)
    coords = " ".join(f"{2 + i * (width - 4) / n:.1f},{height - 2 - (v / hi) * (height - 4):.1f}" for i, v in pts)
    last_x, last_y = coords.split(" ")[-1].split(",")
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f'<polyline points="{coords}" fill="none" stroke="#4c72b0" stroke-width="1.5"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="2.2" fill="#4c72b0"/></svg>'
    )

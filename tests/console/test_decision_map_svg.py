"""The decision map keeps every node's name inside the picture: the first column's nodes sit 70 px
from the left border, and a name of 28 characters centred under them ran past it (the SVG clips it)."""

from __future__ import annotations

import re

from rlops.console.svg import CHAR_W, HEIGHT, WIDTH, decision_map


def _node(cluster: int, mean_step: float, steps: int, name: str) -> dict[str, object]:
    return {"cluster": cluster, "mean_step": mean_step, "steps": steps, "low_steps": 0, "low_rate": 0.0,
            "failure_rate": 0.0, "name": name}  # fmt: skip


def test_every_node_name_lies_inside_the_picture() -> None:
    nodes = [
        _node(0, 0.0, 900, "application.channel = branch and more"),
        _node(1, 0.0, 50, "user_profile.credit_score low band"),
        _node(2, 5.0, 400, "a long name at the right-hand side"),
    ]
    view = {"nodes": nodes, "edges": [{"source": 0, "target": 2, "count": 10, "action": "screen"}]}
    svg = decision_map(view)
    names = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="middle" class="node-name">([^<]*)</text>', svg)
    assert len(names) == 3
    for x, y, text in names:
        half = CHAR_W * len(text) / 2
        assert float(x) - half >= 0 and float(x) + half <= WIDTH, (x, text)
        assert float(y) <= HEIGHT

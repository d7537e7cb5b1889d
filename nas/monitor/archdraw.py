"""Drawings of architectures of registered spaces (never user code): the NAS-Bench-201 cell as a graph.

A NAS-Bench-201 cell has 4 nodes and 6 edges ``j -> i`` (``i > j``), each one operation; ``none`` edges
are drawn dashed and grey (they carry nothing). Other spaces are shown as a table of their decisions.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

NODE_XY = {0: (0.0, 0.0), 1: (1.0, 0.8), 2: (2.0, -0.8), 3: (3.0, 0.0)}
OP_COLOR = {"none": "#bbbbbb", "skip_connect": "#54a24b", "nor_conv_1x1": "#4c78a8",
            "nor_conv_3x3": "#e45756", "avg_pool_3x3": "#f58518"}


def nb201_edges(arch: dict[str, Any]) -> list[tuple[int, int, str]]:
    """(from, to, op) of a NAS-Bench-201 cell's decisions (named ``i<-j`` or as the space names them).

    >>> from nas.search_spaces.nb201 import NB201Space
    >>> space = NB201Space()
    >>> arch = space.parse("|nor_conv_3x3~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|none~1|nor_conv_1x1~2|")
    >>> nb201_edges(arch)[:2]
    [(0, 1, 'nor_conv_3x3'), (0, 2, 'none')]
    """
    from nas.search_spaces.nb201 import EDGE_NAMES, EDGES

    return [(j, i, str(arch[name])) for (i, j), name in zip(EDGES, EDGE_NAMES)]


def nb201_cell(arch: dict[str, Any], title: str) -> go.Figure:
    """The cell as a small graph: nodes 0..3, each edge labelled by its operation."""
    fig = go.Figure()
    for j, i, op in nb201_edges(arch):
        (x0, y0), (x1, y1) = NODE_XY[j], NODE_XY[i]
        bend = 0.35 if (j, i) == (0, 3) else 0.0  # the long edge arcs over the others
        xm, ym = (x0 + x1) / 2, (y0 + y1) / 2 + bend * (1 if (j, i) == (0, 3) else 0) * 2.2
        fig.add_scatter(x=[x0, xm, x1], y=[y0, ym, y1], mode="lines", hoverinfo="skip", showlegend=False,
                        line={"color": OP_COLOR.get(op, "#333"), "width": 3, "shape": "spline",
                              "dash": "dot" if op == "none" else "solid"})
        fig.add_annotation(x=xm, y=ym, text=op, showarrow=False, font={"size": 11, "color": "#222"},
                           bgcolor="rgba(255,255,255,0.85)")
        fig.add_annotation(x=x1, y=y1, ax=xm, ay=ym, xref="x", yref="y", axref="x", ayref="y", text="",
                           showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.5, standoff=16,
                           arrowcolor=OP_COLOR.get(op, "#333"))
    fig.add_scatter(x=[p[0] for p in NODE_XY.values()], y=[p[1] for p in NODE_XY.values()], mode="markers+text",
                    text=[str(n) for n in NODE_XY], textfont={"color": "white", "size": 14}, showlegend=False,
                    marker={"size": 30, "color": "#333"}, hovertemplate="node %{text}<extra></extra>")
    fig.update_layout(title={"text": title, "font": {"size": 13}}, height=280, template="plotly_white",
                      xaxis={"visible": False, "range": [-0.4, 3.4]}, yaxis={"visible": False, "range": [-1.3, 1.6]},
                      margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def draw(space: str, arch: dict[str, Any], title: str) -> go.Figure | None:
    """A drawing of ``arch`` for a registered space that has one (nb201), else None."""
    if space == "nb201":
        try:
            return nb201_cell(arch, title)
        except KeyError:
            return None
    return None

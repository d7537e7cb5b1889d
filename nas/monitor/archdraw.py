"""Drawings of architectures: the NAS-Bench-201 cell as a graph; any other space's built module as the graph
of its forward pass (:mod:`nas.monitor.archgraph`).

A NAS-Bench-201 cell has 4 nodes and 6 edges ``j -> i`` (``i > j``), each one operation; ``none`` edges
are drawn dashed and grey (they carry nothing). The report draws registered spaces only (it never imports user
code); ``nas best --draw FILE`` rebuilds a ``module:Class`` space as ``--evaluate-test`` does.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

if TYPE_CHECKING:
    from nas.core.space import SearchSpace, Task
    from nas.run.config import RunConfig

NODE_X = (0.0, 1.0, 2.0, 3.0)  # nodes in a row; edges between neighbours straight, longer ones arcs
ARC = {(0, 2): 0.7, (1, 3): -0.7, (0, 3): 1.4}  # arc heights: above, below, above and higher
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
    """The cell as a small graph: nodes 0..3 in a row, each edge an arrow labelled by its operation."""
    from nas.monitor.figures import literal  # (the run's text: shown as it is)

    fig = go.Figure()
    t = np.linspace(0.0, 1.0, 25)
    for j, i, op in nb201_edges(arch):
        x0, x1, h = NODE_X[j], NODE_X[i], ARC.get((j, i), 0.0)
        xs, ys = x0 + (x1 - x0) * t, 4 * h * t * (1 - t)  # a parabola from node j to node i
        color = OP_COLOR.get(op, "#333")
        fig.add_scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                        line={"color": color, "width": 3, "dash": "dot" if op == "none" else "solid"})
        fig.add_annotation(x=xs[-1], y=ys[-1], ax=xs[-6], ay=ys[-6], xref="x", yref="y", axref="x", ayref="y",
                           text="", showarrow=True, arrowhead=2, arrowsize=1.3, arrowwidth=2, standoff=15,
                           arrowcolor=color)
        fig.add_annotation(x=xs[12], y=ys[12], text=literal(op), showarrow=False, font={"size": 11, "color": "#222"},
                           bgcolor="rgba(255,255,255,0.9)")
    fig.add_scatter(x=list(NODE_X), y=[0.0] * 4, mode="markers+text", text=["0", "1", "2", "3"],
                    textfont={"color": "white", "size": 14}, showlegend=False, marker={"size": 30, "color": "#333"},
                    hovertemplate="node %{text}<extra></extra>")
    fig.update_layout(title={"text": literal(title), "font": {"size": 13}}, height=300, template="plotly_white",
                      xaxis={"visible": False, "range": [-0.3, 3.3]}, yaxis={"visible": False, "range": [-0.95, 1.6]},
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


class Drawer:
    """Draws a run's architectures (given as the results frame's text): builds its space once (``allow_import``:
    a ``module:Class`` space's module may be imported) and its task once (from the run's dataset spec); None
    for what cannot be drawn (user code not allowed, no dataset, a build that fails)."""

    def __init__(self, cfg: RunConfig, *, allow_import: bool = False,
                 outside: str | os.PathLike[str] | None = None) -> None:
        self.cfg, self.allow_import, self.outside = cfg, allow_import, outside
        self._space: SearchSpace | None = None
        self._task: Task | None = None
        self._tried = False

    def _load(self) -> None:
        if self._tried:
            return
        self._tried = True
        from nas.core.spec import space_from_spec

        try:
            self._space = space_from_spec(self.cfg.search.space_spec(), allow_import=self.allow_import,
                                          outside=self.outside)
        except Exception:  # (user code not allowed here, or another version's arguments)
            return
        if self._space.registered_name != "nb201" and self.cfg.train.dataset:
            try:
                from nas.train.data import load_dataset

                self._task = load_dataset(self.cfg.train.dataset, seed=self.cfg.search.seed).task
            except Exception:  # (the dataset is not here: no picture, the table stays)
                return

    def arch(self, text: str) -> dict[str, Any] | None:
        self._load()
        if self._space is None:
            return None
        try:
            return dict(self._space.parse(text)) if self._space.registered_name else dict(json.loads(text))
        except Exception:
            try:
                return dict(json.loads(text))
            except ValueError:
                return None

    def graph(self, text: str) -> Any:
        """The :class:`nas.monitor.archgraph.Graph` of the built module, or None."""
        from nas.monitor.archgraph import module_graph

        arch = self.arch(text)
        if arch is None or self._space is None or self._task is None:
            return None
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # (tiny torch work in the driver: one thread)
        try:
            return module_graph(self._space.build(arch, self._task))
        except Exception:  # (the space cannot build it: the table stays)
            return None
        finally:
            torch.set_num_threads(threads)

    def figure(self, text: str, title: str) -> go.Figure | None:
        arch = self.arch(text)
        if arch is None or self._space is None:
            return None
        if self._space.registered_name == "nb201":
            return draw("nb201", arch, title)
        from nas.monitor.archgraph import graph_figure

        graph = self.graph(text)
        return None if graph is None else graph_figure(graph, title)

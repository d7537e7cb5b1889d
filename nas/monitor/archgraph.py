"""A picture of any architecture: the graph of the module a space builds, traced by ``torch.fx``.

:func:`module_graph` traces the built ``nn.Module`` symbolically (no data flows; nothing is trained) into nodes
(the input, each submodule called, each function such as ``add`` or ``flatten``, the output) with the nodes
each one reads. A module whose ``forward`` branches on tensor values cannot be traced; it is then drawn as the
chain of its leaf submodules in definition order (said in the title). :func:`graph_figure` lays the nodes out
in layers (a node one layer below the deepest node it reads) as a plotly figure, :func:`to_dot` writes the
same graph as Graphviz DOT text. NAS-Bench-201 cells keep their own drawing (:mod:`nas.monitor.archdraw`).
Hand-written layout: a layered DAG is ten lines, and no maintained drawing package is a dependency here.

>>> import torch.nn as nn
>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.conv, self.fc = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4, 2)
...     def forward(self, x):
...         y = self.conv(x)
...         return self.fc((y + x).mean((2, 3)))
>>> g = module_graph(Net())
>>> [(n.name, n.label, n.inputs) for n in g.nodes][:3]
[('x', 'input', ()), ('conv', 'Conv2d 1->4 k3', ('x',)), ('add', 'add', ('conv', 'x'))]
>>> g.depths()["fc"]
4
"""

from __future__ import annotations

import dataclasses
from typing import Any

import plotly.graph_objects as go
import torch

KIND_COLOR = {"input": "#54a24b", "output": "#54a24b", "module": "#4c78a8", "function": "#f58518"}


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    label: str
    kind: str  # input, module, function, output
    inputs: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Graph:
    nodes: list[Node]
    traced: bool  # False: the chain of leaf modules (forward could not be traced)

    def depths(self) -> dict[str, int]:
        """Each node's layer: one below the deepest node it reads (the fx graph is in topological order)."""
        depth: dict[str, int] = {}
        for n in self.nodes:
            depth[n.name] = 1 + max((depth[i] for i in n.inputs if i in depth), default=-1)
        return depth


def module_label(module: torch.nn.Module) -> str:
    """A short label: the class and its main sizes.

    >>> module_label(torch.nn.Conv2d(3, 16, 3, stride=2)), module_label(torch.nn.Linear(8, 10))
    ('Conv2d 3->16 k3 s2', 'Linear 8->10')
    """
    name = type(module).__name__
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        k, s = module.kernel_size[0], module.stride[0]
        g = f" g{module.groups}" if module.groups > 1 else ""
        return f"{name} {module.in_channels}->{module.out_channels} k{k}{f' s{s}' if s > 1 else ''}{g}"
    if isinstance(module, torch.nn.Linear):
        return f"{name} {module.in_features}->{module.out_features}"
    return name


def _arg_names(args: Any) -> list[str]:
    out: list[str] = []
    for a in args if isinstance(args, (list, tuple)) else [args]:
        if isinstance(a, torch.fx.Node):
            out.append(a.name)
        elif isinstance(a, (list, tuple)):
            out.extend(_arg_names(a))
    return out


def module_graph(model: torch.nn.Module) -> Graph:
    """The graph of ``model``'s forward pass (``torch.fx.symbolic_trace``), or its leaf modules as a chain."""
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception:  # (forward branches on values, or calls what fx cannot trace)
        leaves = [(n, m) for n, m in model.named_modules() if n and not any(True for _ in m.children())]
        nodes, prev = [Node("input", "input", "input", ())], "input"
        for name, m in leaves:
            nodes.append(Node(name, module_label(m), "module", (prev,)))
            prev = name
        nodes.append(Node("output", "output", "output", (prev,)))
        return Graph(nodes, traced=False)
    mods = dict(gm.named_modules())
    nodes = []
    for n in gm.graph.nodes:
        ins = tuple(dict.fromkeys(_arg_names(n.args) + _arg_names(list(n.kwargs.values()))))
        if n.op == "placeholder":
            nodes.append(Node(n.name, "input", "input", ()))
        elif n.op == "output":
            nodes.append(Node(n.name, "output", "output", ins))
        elif n.op == "call_module":
            nodes.append(Node(n.name, module_label(mods[str(n.target)]), "module", ins))
        elif n.op in ("call_function", "call_method"):
            fn = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            nodes.append(Node(n.name, str(fn), "function", ins))
        elif n.op == "get_attr":
            nodes.append(Node(n.name, str(n.target), "function", ins))
    return Graph(nodes, traced=True)


def graph_figure(graph: Graph, title: str) -> go.Figure:
    """The graph top to bottom, a layer per row; hover a node for its name."""
    from nas.monitor.figures import literal, literals  # (the run's text: shown as it is)

    depth = graph.depths()
    layers: dict[int, list[str]] = {}
    for n in graph.nodes:
        layers.setdefault(depth[n.name], []).append(n.name)
    pos = {name: (i - (len(row) - 1) / 2, -d) for d, row in layers.items() for i, name in enumerate(row)}
    fig = go.Figure()
    xs: list[float | None] = []
    ys: list[float | None] = []
    for n in graph.nodes:
        for i in n.inputs:
            if i in pos:
                xs += [pos[i][0], pos[n.name][0], None]
                ys += [pos[i][1], pos[n.name][1], None]
    fig.add_scatter(x=xs, y=ys, mode="lines", line={"color": "#999", "width": 1.5}, hoverinfo="skip",
                    showlegend=False)
    fig.add_scatter(x=[pos[n.name][0] for n in graph.nodes], y=[pos[n.name][1] for n in graph.nodes],
                    mode="markers+text", text=literals(n.label for n in graph.nodes), textposition="middle right",
                    marker={"size": 12, "color": [KIND_COLOR[n.kind] for n in graph.nodes]},
                    customdata=literals(n.name for n in graph.nodes),
                    hovertemplate="%{customdata}: %{text}<extra></extra>",
                    showlegend=False, textfont={"size": 11})
    width = max(len(r) for r in layers.values())
    note = "" if graph.traced else " (leaf modules in order: forward could not be traced)"
    fig.update_layout(title={"text": literal(title + note), "font": {"size": 13}}, template="plotly_white",
                      height=max(300, 34 * len(layers) + 80), margin={"l": 10, "r": 10, "t": 40, "b": 10},
                      xaxis={"visible": False, "range": [-width / 2 - 0.5, width / 2 + 2.5]},
                      yaxis={"visible": False})
    return fig


def to_dot(graph: Graph, title: str = "architecture") -> str:
    """Graphviz DOT text of the graph (``dot -Tsvg`` draws it).

    >>> print(to_dot(Graph([Node("x", "input", "input", ()), Node("out", "output", "output", ("x",))], True)))
    digraph "architecture" {
      node [shape=box, fontname=Helvetica];
      "x" [label="input"];
      "out" [label="output"];
      "x" -> "out";
    }
    """
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"digraph {q(title)} {{", "  node [shape=box, fontname=Helvetica];"]
    lines += [f"  {q(n.name)} [label={q(n.label)}];" for n in graph.nodes]
    lines += [f"  {q(i)} -> {q(n.name)};" for n in graph.nodes for i in n.inputs]
    return "\n".join(lines + ["}"])


__all__ = ["Graph", "Node", "graph_figure", "module_graph", "module_label", "to_dot"]

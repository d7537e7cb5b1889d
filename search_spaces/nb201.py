"""The NAS-Bench-201 cell space (Dong & Yang, "NAS-Bench-201", ICLR 2020).

A cell is a DAG of 4 nodes; each of its 6 edges ``j -> i`` (``i > j``) applies one of :data:`OPS`, and
node ``i`` is the sum of its incoming edges. Decisions are named ``edge_i_j`` in arch-string order
(1<-0, 2<-0, 2<-1, 3<-0, 3<-1, 3<-2); 5**6 = 15,625 cells. :meth:`NB201Space.format` writes the
benchmark's string and :func:`op_code` its 6-digit code (digit = index into :data:`OPS`), the keys of
``shared/benchdata/nb201/nb201.csv``.

>>> space = NB201Space()
>>> space.size
15625
>>> arch = from_op_code("334131")
>>> space.format(arch)
'|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|'
>>> space.parse(space.format(arch)) == arch, op_code(arch)
(True, '334131')

:meth:`NB201Space.build` follows the paper's macro skeleton (stem, 3 stages of N cells separated by
residual reduction blocks, BN-ReLU, global pool, linear) at a size that trains quickly on small images;
:meth:`NB201Space.supernet` is the same skeleton with every op on every edge (:class:`NB201Supernet`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from nas.core.registry import register_space
from nas.core.space import InvalidArchitecture, SearchSpace, Task
from nas.core.types import Arch
from nas.core.weight_sharing import Supernet

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EDGES = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))  # (to, from), in arch-string order
EDGE_NAMES = tuple(f"edge_{i}_{j}" for i, j in EDGES)


def op_code(arch: Arch) -> str:
    """The 6-digit code of ``arch``: per edge in arch-string order, the index of its op in :data:`OPS`."""
    return "".join(str(OPS.index(arch[name])) for name in EDGE_NAMES)


def from_op_code(code: str) -> dict[str, str]:
    """The inverse of :func:`op_code`."""
    if len(code) != len(EDGES) or any(c not in "01234" for c in code):
        raise InvalidArchitecture(f"an op code is {len(EDGES)} digits in 0..4, got {code!r}")
    return {name: OPS[int(c)] for name, c in zip(EDGE_NAMES, code)}


class ReLUConvBN(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__(nn.ReLU(), nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False),
                         nn.BatchNorm2d(c_out))


class ResidualReduction(nn.Module):
    """NAS-Bench-201's reduction block: two ReLU-Conv-BN (the first with stride 2) plus a pooled shortcut."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(ReLUConvBN(c_in, c_out, 3, stride=2), ReLUConvBN(c_out, c_out, 3))
        # ceil_mode keeps the shortcut's size equal to the stride-2 conv's for odd sizes (7x7 -> 4x4)
        self.shortcut = nn.Sequential(nn.AvgPool2d(2, 2, ceil_mode=True),
                                      nn.Conv2d(c_in, c_out, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.shortcut(x)


def make_op(name: str, channels: int) -> nn.Module:
    """The module for one edge (``none`` edges get no module: they add nothing to their node)."""
    if name == "skip_connect":
        return nn.Identity()
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    return ReLUConvBN(channels, channels, 1 if name == "nor_conv_1x1" else 3)


class Cell(nn.Module):
    """One NAS-Bench-201 cell: node i = sum of op(node j) over its edges; the output is node 3.

    A node whose edges are all ``none`` is zeros (as the benchmark's zero op gives), not an error."""

    def __init__(self, arch: Arch, channels: int) -> None:
        super().__init__()
        self.edges = [(i, j, name) for (i, j), name in zip(EDGES, EDGE_NAMES) if arch[name] != "none"]
        self.ops = nn.ModuleDict({name: make_op(str(arch[name]), channels) for _, _, name in self.edges})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        for i in range(1, 4):
            inputs = [self.ops[name](nodes[j]) for to, j, name in self.edges if to == i]
            nodes.append(sum(inputs[1:], inputs[0]) if inputs else torch.zeros_like(x))
        return nodes[3]


class SuperCell(nn.Module):
    """A cell with every op on every edge; :meth:`run` computes the cell of ``arch`` from the ops it picks."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.ops = nn.ModuleDict({edge: nn.ModuleDict({op: make_op(op, channels) for op in OPS if op != "none"})
                                  for edge in EDGE_NAMES})

    def run(self, x: torch.Tensor, arch: Arch) -> torch.Tensor:
        nodes = [x]
        for i in range(1, 4):
            inputs = [cast(nn.ModuleDict, self.ops[name])[str(arch[name])](nodes[j])
                      for (to, j), name in zip(EDGES, EDGE_NAMES) if to == i and arch[name] != "none"]
            nodes.append(sum(inputs[1:], inputs[0]) if inputs else torch.zeros_like(x))
        return nodes[3]


class NB201Supernet(Supernet):
    """The NAS-Bench-201 network with a :class:`SuperCell` in place of every cell (the one-shot model of SPOS
    and of the benchmark's own weight-sharing baselines). A path's state is the standalone network's: a cell's
    ``ops.<edge>.<op>.*`` tensors become ``ops.<edge>.*`` for the op ``arch`` picks; all else is shared."""

    def __init__(self, space: NB201Space, task: Task) -> None:
        super().__init__(space, task)
        self.layers = nn.ModuleList(space._layers(task, SuperCell))

    def run(self, x: torch.Tensor, arch: Arch) -> torch.Tensor:
        for layer in self.layers:
            x = layer.run(x, arch) if isinstance(layer, SuperCell) else layer(x)
        return x

    def subnet_state(self, arch: Arch) -> dict[str, torch.Tensor]:
        out = {}
        for key, value in self.state_dict().items():
            index, _, rest = key.removeprefix("layers.").partition(".")
            if rest.startswith("ops."):  # a cell's op: ops.<edge>.<op>.<tensor>
                _, edge, op, tensor = rest.split(".", 3)
                if arch[edge] != op:
                    continue
                rest = f"ops.{edge}.{tensor}"
            out[f"{index}.{rest}"] = value
        return out


@register_space("nb201")
class NB201Space(SearchSpace):
    """NAS-Bench-201 cells in a network of ``channels`` stem channels and ``cells_per_stage`` cells per
    stage (the paper: 16 and 5; the defaults here are small enough to train on 8x8 digits on a CPU)."""

    def __init__(self, channels: int = 16, cells_per_stage: int = 1) -> None:
        for name, value in (("channels", channels), ("cells_per_stage", cells_per_stage)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, but got {name}={value!r}")
        self.channels = channels
        self.cells_per_stage = cells_per_stage

    def dims(self) -> dict[str, tuple[str, ...]]:
        return {name: OPS for name in EDGE_NAMES}

    def format(self, arch: Arch) -> str:
        self.validate(arch)
        nodes = ("|".join(f"{arch[f'edge_{i}_{j}']}~{j}" for j in range(i)) for i in range(1, 4))
        return "|" + "|+|".join(nodes) + "|"

    def parse(self, text: str) -> dict[str, Any]:
        groups = text.strip().split("+")
        if len(groups) != 3:
            raise InvalidArchitecture(
                f"a NAS-Bench-201 string has 3 '+'-separated nodes like "
                f"'|op~0|+|op~0|op~1|+|op~0|op~1|op~2|', got {text!r}"
            )
        arch: dict[str, Any] = {}
        for i, group in enumerate(groups, start=1):
            tokens = group.strip().strip("|").split("|")
            if len(tokens) != i:
                raise InvalidArchitecture(f"node {i} needs {i} edges, got {group!r} in {text!r}")
            for j, token in enumerate(tokens):
                op, sep, src = token.partition("~")
                if not sep or src != str(j) or op not in OPS:
                    raise InvalidArchitecture(
                        f"bad token {token!r} for edge {i}<-{j} in {text!r}: expected "
                        f"'<op>~{j}' with op in {list(OPS)}"
                    )
                arch[f"edge_{i}_{j}"] = op
        return arch

    def build(self, arch: Arch, task: Task) -> nn.Module:
        self.validate(arch)
        return nn.Sequential(*self._layers(task, lambda c: Cell(arch, c)))

    def supernet(self, task: Task) -> NB201Supernet:
        """Every op on every edge (:class:`NB201Supernet`); the stem, reductions and classifier are shared."""
        return NB201Supernet(self, task)

    def _layers(self, task: Task, make_cell: Callable[[int], nn.Module]) -> list[nn.Module]:
        """The macro skeleton around ``make_cell(channels)``: stem, 3 stages, BN-ReLU, pool, classifier."""
        if len(task.input_shape) != 3:
            raise ValueError(
                f"the nb201 space needs image inputs (C, H, W), got input_shape={tuple(task.input_shape)}"
            )
        c = self.channels
        layers: list[nn.Module] = [nn.Conv2d(task.input_shape[0], c, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(c)]
        for stage in range(3):
            if stage > 0:
                layers.append(ResidualReduction(c, 2 * c))
                c *= 2
            layers += [make_cell(c) for _ in range(self.cells_per_stage)]
        layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Linear(c, task.num_classes)]
        return layers

    def __repr__(self) -> str:
        return f"NB201Space(channels={self.channels}, cells_per_stage={self.cells_per_stage})"

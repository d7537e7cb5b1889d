"""The networks of the NAS-Bench-201 space (:mod:`nas.search_spaces.nb201`): its cells, the reduction block, the
macro skeleton and the supernet. Apart from the space, so that reading a run's NB201 architectures (names, strings,
codes) never imports torch; :meth:`NB201Space.build` imports this module.

A cell is told its ``wiring``: ``((to, from), decision)`` per edge in arch-string order (the space's
``EDGES`` and ``EDGE_NAMES``), and a super-cell also the ``ops`` each edge chooses from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from nas.core.space import Task
from nas.core.types import Arch
from nas.core.weight_sharing import Supernet

if TYPE_CHECKING:
    from nas.search_spaces.nb201 import NB201Space

Wiring = Sequence[tuple[tuple[int, int], str]]


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

    def __init__(self, arch: Arch, channels: int, wiring: Wiring) -> None:
        super().__init__()
        self.edges = [(i, j, name) for (i, j), name in wiring if arch[name] != "none"]
        self.ops = nn.ModuleDict({name: make_op(str(arch[name]), channels) for _, _, name in self.edges})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        for i in range(1, 4):
            inputs = [self.ops[name](nodes[j]) for to, j, name in self.edges if to == i]
            nodes.append(sum(inputs[1:], inputs[0]) if inputs else torch.zeros_like(x))
        return nodes[3]


class SuperCell(nn.Module):
    """A cell with every op on every edge; :meth:`run` computes the cell of ``arch`` from the ops it picks."""

    def __init__(self, channels: int, wiring: Wiring, ops: Sequence[str]) -> None:
        super().__init__()
        self.wiring = list(wiring)
        self.ops = nn.ModuleDict({edge: nn.ModuleDict({op: make_op(op, channels) for op in ops if op != "none"})
                                  for _, edge in self.wiring})

    def run(self, x: torch.Tensor, arch: Arch) -> torch.Tensor:
        nodes = [x]
        for i in range(1, 4):
            inputs = [cast(nn.ModuleDict, self.ops[name])[str(arch[name])](nodes[j])
                      for (to, j), name in self.wiring if to == i and arch[name] != "none"]
            nodes.append(sum(inputs[1:], inputs[0]) if inputs else torch.zeros_like(x))
        return nodes[3]


def layers(space: NB201Space, task: Task, make_cell: Callable[[int], nn.Module]) -> list[nn.Module]:
    """The macro skeleton around ``make_cell(channels)``: stem, 3 stages, BN-ReLU, pool, classifier."""
    if len(task.input_shape) != 3:
        raise ValueError(
            f"the nb201 space needs image inputs (C, H, W), got input_shape={tuple(task.input_shape)}"
        )
    c = space.channels
    out: list[nn.Module] = [nn.Conv2d(task.input_shape[0], c, 3, padding=1, bias=False), nn.BatchNorm2d(c)]
    for stage in range(3):
        if stage > 0:
            out.append(ResidualReduction(c, 2 * c))
            c *= 2
        out += [make_cell(c) for _ in range(space.cells_per_stage)]
    out += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, task.num_classes)]
    return out


class NB201Supernet(Supernet):
    """The NAS-Bench-201 network with a :class:`SuperCell` in place of every cell (the one-shot model of SPOS
    and of the benchmark's own weight-sharing baselines). A path's state is the standalone network's: a cell's
    ``ops.<edge>.<op>.*`` tensors become ``ops.<edge>.*`` for the op ``arch`` picks; all else is shared."""

    def __init__(self, space: NB201Space, task: Task) -> None:
        super().__init__(space, task)
        self.layers = nn.ModuleList(layers(space, task, space.super_cell))

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


__all__ = ["Cell", "NB201Supernet", "ReLUConvBN", "ResidualReduction", "SuperCell", "layers", "make_op"]

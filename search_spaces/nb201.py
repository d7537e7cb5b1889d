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
:meth:`NB201Space.supernet` is the same skeleton with every op on every edge. The networks are in
:mod:`nas.search_spaces.nb201_net`, imported only when one is built: this module imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nas.core.registry import register_space
from nas.core.space import InvalidArchitecture, SearchSpace, Task
from nas.core.types import Arch

if TYPE_CHECKING:
    from torch import nn

    from nas.search_spaces.nb201_net import NB201Supernet

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EDGES = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))  # (to, from), in arch-string order
EDGE_NAMES = tuple(f"edge_{i}_{j}" for i, j in EDGES)
WIRING = tuple(zip(EDGES, EDGE_NAMES))  # ((to, from), decision) per edge: what a cell is built from


def op_code(arch: Arch) -> str:
    """The 6-digit code of ``arch``: per edge in arch-string order, the index of its op in :data:`OPS`."""
    return "".join(str(OPS.index(arch[name])) for name in EDGE_NAMES)


def from_op_code(code: str) -> dict[str, str]:
    """The inverse of :func:`op_code`."""
    if len(code) != len(EDGES) or any(c not in "01234" for c in code):
        raise InvalidArchitecture(f"an op code is {len(EDGES)} digits in 0..4, got {code!r}")
    return {name: OPS[int(c)] for name, c in zip(EDGE_NAMES, code)}


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
        from torch import nn

        from nas.search_spaces.nb201_net import Cell, layers  # (torch only where a network is built)

        self.validate(arch)
        return nn.Sequential(*layers(self, task, lambda c: Cell(arch, c, WIRING)))

    def supernet(self, task: Task) -> NB201Supernet:
        """Every op on every edge (:class:`nas.search_spaces.nb201_net.NB201Supernet`); the stem, reductions and
        classifier are shared."""
        from nas.search_spaces.nb201_net import NB201Supernet

        return NB201Supernet(self, task)

    def super_cell(self, channels: int) -> nn.Module:
        """A cell with every op on every edge (the supernet's)."""
        from nas.search_spaces.nb201_net import SuperCell

        return SuperCell(channels, WIRING, OPS)

    def __repr__(self) -> str:
        return f"NB201Space(channels={self.channels}, cells_per_stage={self.cells_per_stage})"

"""A macro space of plain feed-forward networks: a CNN for images, an MLP for tabular data.

Ten decisions: ``depth`` (1-3 blocks), ``width_i`` and ``kernel_i`` for blocks 0..2, and one
``activation``, ``norm`` and ``dropout`` for the whole network (11,664 architectures). For an image task
(``input_shape == (C, H, W)``) block i is conv(kernel_i, "same" padding) -> norm -> activation, followed
by global average pooling, dropout and a linear classifier. For any other input (tabular ``(features,)``)
the input is flattened and block i is linear -> norm -> activation -> dropout, then a linear classifier.

Decisions of blocks at or beyond ``depth`` are unused, and so are the ``kernel_i`` of an MLP: they are
kept so that every architecture has the same decisions (the RL controller's fixed action sequence),
which means several architectures build the same network.

>>> import torch
>>> space = MacroSpace()
>>> space.size
11664
>>> arch = {"depth": 2, "width_0": 16, "width_1": 32, "width_2": 64, "kernel_0": 3, "kernel_1": 5,
...         "kernel_2": 3, "activation": "gelu", "norm": "batch", "dropout": 0.1}
>>> space.build(arch, Task(input_shape=(1, 8, 8), num_classes=10))(torch.zeros(4, 1, 8, 8)).shape
torch.Size([4, 10])
>>> space.build(arch, Task(input_shape=(13,), num_classes=3))(torch.zeros(4, 13)).shape
torch.Size([4, 3])

:meth:`MacroSpace.supernet` holds the largest network (three blocks of the widest width and the largest
kernel, a BatchNorm and a bias per block); a sub-network is its first ``depth`` blocks, the first ``width_i``
channels of each, the centre ``kernel_i`` x ``kernel_i`` of each kernel (Cai et al. 2020, "Once-for-All",
elastic width, kernel and depth; the centre crop without OFA's kernel transformation matrices).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nas.core.registry import register_space
from nas.core.space import SearchSpace, Task
from nas.core.types import Arch

if TYPE_CHECKING:
    from torch import nn

    from nas.search_spaces.macro_net import MacroSupernet

MAX_DEPTH = 3
WIDTHS = (16, 32, 64)
KERNELS = (3, 5)
ACTIVATIONS = ("relu", "gelu", "silu")  # the modules: nas.search_spaces.macro_net.ACTIVATIONS
NORMS = ("none", "batch")
DROPOUTS = (0.0, 0.1, 0.3)


@register_space("macro")
class MacroSpace(SearchSpace):
    """Plain CNNs (image inputs) or MLPs (everything else) of up to three blocks."""

    def dims(self) -> list[tuple[str, tuple]]:
        return [
            ("depth", tuple(range(1, MAX_DEPTH + 1))),
            *((f"width_{i}", WIDTHS) for i in range(MAX_DEPTH)),
            *((f"kernel_{i}", KERNELS) for i in range(MAX_DEPTH)),
            ("activation", ACTIVATIONS),
            ("norm", NORMS),
            ("dropout", DROPOUTS),
        ]

    def build(self, arch: Arch, task: Task) -> nn.Module:
        self.validate(arch)
        from nas.search_spaces.macro_net import build  # (torch only where a network is built)

        return build(arch, task)

    def supernet(self, task: Task) -> MacroSupernet:
        """The largest network, sub-networks by slicing (:class:`nas.search_spaces.macro_net.MacroSupernet`)."""
        from nas.search_spaces.macro_net import MacroSupernet

        return MacroSupernet(self, task)

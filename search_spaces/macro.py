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
"""

from __future__ import annotations

import math

from torch import nn

from nas.core.registry import register_space
from nas.core.space import SearchSpace, Task
from nas.core.types import Arch

MAX_DEPTH = 3
WIDTHS = (16, 32, 64)
KERNELS = (3, 5)
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}
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
            ("activation", tuple(ACTIVATIONS)),
            ("norm", NORMS),
            ("dropout", DROPOUTS),
        ]

    def build(self, arch: Arch, task: Task) -> nn.Module:
        self.validate(arch)
        depth, batch_norm = int(arch["depth"]), arch["norm"] == "batch"
        act, dropout = ACTIVATIONS[str(arch["activation"])], float(arch["dropout"])
        widths = [int(arch[f"width_{i}"]) for i in range(depth)]
        layers: list[nn.Module] = []
        if len(task.input_shape) == 3:  # image: conv blocks, global pool, classifier
            c = task.input_shape[0]
            for i, w in enumerate(widths):
                k = int(arch[f"kernel_{i}"])
                layers += [nn.Conv2d(c, w, k, padding=k // 2, bias=not batch_norm),
                           nn.BatchNorm2d(w) if batch_norm else nn.Identity(), act()]
                c = w
            layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout)]
        else:  # tabular (or any other shape, flattened): an MLP
            c = math.prod(task.input_shape)
            layers.append(nn.Flatten())
            for w in widths:
                layers += [nn.Linear(c, w, bias=not batch_norm),
                           nn.BatchNorm1d(w) if batch_norm else nn.Identity(), act(), nn.Dropout(dropout)]
                c = w
        layers.append(nn.Linear(c, task.num_classes))
        return nn.Sequential(*layers)

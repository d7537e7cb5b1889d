"""The networks of :mod:`nas.search_spaces.macro`: the plain CNN or MLP an architecture builds, and the supernet
that holds them all; a module of its own so that naming, listing or checking the space imports no torch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from nas.core.space import Task
from nas.core.types import Arch
from nas.core.weight_sharing import Supernet

if TYPE_CHECKING:
    from nas.search_spaces.macro import MacroSpace

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def build(arch: Arch, task: Task) -> nn.Module:
    """The network of a checked ``arch`` (:meth:`nas.search_spaces.macro.MacroSpace.build`)."""
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


class MacroSupernet(Supernet):
    """The space's deepest stack of blocks at its widest width (its largest kernels for images), each with a bias
    (used by ``norm=none`` paths) and a BatchNorm (used by ``norm=batch`` paths, running statistics sliced like
    the weights), and a classifier over the widest last block."""

    def __init__(self, space: MacroSpace, task: Task) -> None:
        super().__init__(space, task)
        self.image = len(task.input_shape) == 3
        options = space.decisions  # (from the space: this module imports nothing of it, no import loop)
        self.depth, self.kernel = max(options["depth"]), max(options["kernel_0"])
        c_in = task.input_shape[0] if self.image else math.prod(task.input_shape)
        w, k = max(options["width_0"]), self.kernel
        self.layers = nn.ModuleList(
            nn.Conv2d(w if i else c_in, w, k, padding=k // 2) if self.image else nn.Linear(w if i else c_in, w)
            for i in range(self.depth))
        self.norms = nn.ModuleList(nn.BatchNorm2d(w) if self.image else nn.BatchNorm1d(w) for _ in range(self.depth))
        self.classifier = nn.Linear(w, task.num_classes)

    def _cut(self, i: int, arch: Arch, c_in: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block ``i``'s weight and bias for ``arch`` with ``c_in`` input channels."""
        layer = cast(nn.Conv2d | nn.Linear, self.layers[i])
        w = int(arch[f"width_{i}"])
        weight, bias = layer.weight[:w, :c_in], cast(torch.Tensor, layer.bias)[:w]
        if self.image:
            k, big = int(arch[f"kernel_{i}"]), self.kernel
            lo = (big - k) // 2
            weight = weight[:, :, lo:lo + k, lo:lo + k]
        return weight, bias

    def run(self, x: torch.Tensor, arch: Arch) -> torch.Tensor:
        act, batch_norm = ACTIVATIONS[str(arch["activation"])](), arch["norm"] == "batch"
        dropout = float(arch["dropout"])
        c = x.shape[1] if self.image else math.prod(x.shape[1:])
        if not self.image:
            x = x.flatten(1)
        for i in range(int(arch["depth"])):
            weight, bias = self._cut(i, arch, c)
            w = weight.shape[0]
            if self.image:
                k = weight.shape[-1]
                x = F.conv2d(x, weight, None if batch_norm else bias, padding=k // 2)
            else:
                x = F.linear(x, weight, None if batch_norm else bias)
            if batch_norm:
                x = self._norm(self.norms[i], x, w)
            x = act(x)
            if not self.image:
                x = F.dropout(x, dropout, self.training)
            c = w
        if self.image:
            x = F.dropout(F.adaptive_avg_pool2d(x, 1).flatten(1), dropout, self.training)
        return F.linear(x, self.classifier.weight[:, :c], self.classifier.bias)

    def _norm(self, bn: nn.Module, x: torch.Tensor, w: int) -> torch.Tensor:
        """``bn`` on the first ``w`` channels; in training its running statistics update in place (views)."""
        assert isinstance(bn, nn.modules.batchnorm._BatchNorm) and bn.running_mean is not None
        assert bn.running_var is not None
        if self.training and bn.num_batches_tracked is not None:
            bn.num_batches_tracked.add_(1)
        momentum = bn.momentum
        if momentum is None:  # a cumulative average, as torch's BatchNorm computes it
            momentum = 1.0 / float(bn.num_batches_tracked) if self.training and bn.num_batches_tracked else 0.0
        return F.batch_norm(x, bn.running_mean[:w], bn.running_var[:w], bn.weight[:w], bn.bias[:w],
                            self.training, momentum, bn.eps)

    def subnet_state(self, arch: Arch) -> dict[str, torch.Tensor]:
        depth, batch_norm = int(arch["depth"]), arch["norm"] == "batch"
        per, first = (3, 0) if self.image else (4, 1)  # modules per block, index of block 0 in build's Sequential
        out: dict[str, torch.Tensor] = {}
        c = self.task.input_shape[0] if self.image else math.prod(self.task.input_shape)
        for i in range(depth):
            weight, bias = self._cut(i, arch, c)
            at = first + per * i
            out[f"{at}.weight"] = weight
            if batch_norm:
                w, bn = weight.shape[0], self.norms[i]
                for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                    value = getattr(bn, name)
                    out[f"{at + 1}.{name}"] = value[:w] if value.dim() else value
            else:
                out[f"{at}.bias"] = bias
            c = weight.shape[0]
        at = first + per * depth + (3 if self.image else 0)  # (pool, flatten, dropout before an image classifier)
        out[f"{at}.weight"] = self.classifier.weight[:, :c]
        out[f"{at}.bias"] = self.classifier.bias
        return out

    def extremes(self, arch: Arch) -> tuple[dict[str, Any], dict[str, Any]]:
        """Deepest, widest, largest kernels / shallowest, narrowest, smallest kernels; the rest kept."""
        largest, smallest = dict(arch), dict(arch)
        for name, options in self.space.decisions.items():
            if name == "depth" or name.startswith(("width_", "kernel_")):
                largest[name], smallest[name] = max(options), min(options)
        return largest, smallest

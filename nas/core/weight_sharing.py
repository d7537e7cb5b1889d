"""The supernet contract: one module that runs every architecture of a space with shared weights.

A space that has one returns it from :meth:`nas.core.space.SearchSpace.supernet` (``nb201``: every op on every
edge; ``macro``: the largest widths, kernels and depth, sub-networks by slicing). It is trained by single-path
one-shot training (:mod:`nas.train.supernet_spos`) and its sub-networks are evaluated with inherited weights
(:mod:`nas.train.supernet_eval`). What every supernet offers:

- ``supernet(x, arch)``, or ``supernet.activate(arch)`` then ``supernet(x)``: the output of ``arch``'s path;
- :meth:`Supernet.subnet_state`: the state dict of the standalone network ``space.build(arch, task)``, its
  tensors cut from the supernet's (so ``model.load_state_dict(supernet.subnet_state(arch))`` gives a standalone
  network that computes what the supernet's path computes: ``tests/test_supernet_space.py`` checks it);
- :meth:`Supernet.extremes` (optional): the largest and smallest architectures that agree with a given one on
  every unordered decision, for the sandwich rule; None where the space has no such order.

>>> import torch
>>> from nas.core.space import Task
>>> from nas.search_spaces.macro import MacroSpace
>>> space, task = MacroSpace(), Task((1, 8, 8), 10)
>>> net = space.supernet(task).eval()
>>> arch = {"depth": 2, "width_0": 16, "width_1": 32, "width_2": 64, "kernel_0": 3, "kernel_1": 5,
...         "kernel_2": 3, "activation": "gelu", "norm": "batch", "dropout": 0.1}
>>> alone = space.build(arch, task).eval()
>>> _ = alone.load_state_dict(net.subnet_state(arch))
>>> x = torch.randn(4, 1, 8, 8)
>>> torch.allclose(net(x, arch), alone(x), atol=1e-6)
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from nas.core.types import Arch

if TYPE_CHECKING:
    from nas.core.space import SearchSpace, Task


class Supernet(torch.nn.Module):
    """Base class of a space's supernet. A subclass implements :meth:`run` (the forward pass of one path) and
    :meth:`subnet_state`; :meth:`extremes` where the sandwich rule applies."""

    def __init__(self, space: SearchSpace, task: Task) -> None:
        super().__init__()
        self.space = space
        self.task = task
        self.arch: dict[str, Any] | None = None

    def activate(self, arch: Arch) -> Supernet:
        """Make ``arch`` the path that :meth:`forward` runs (checked against the space)."""
        self.space.validate(arch)
        self.arch = dict(arch)
        return self

    def forward(self, x: torch.Tensor, arch: Arch | None = None) -> torch.Tensor:
        if arch is not None:
            self.activate(arch)
        if self.arch is None:
            raise RuntimeError(f"{type(self).__name__}: no architecture is active; call supernet(x, arch) or "
                               "supernet.activate(arch) first")
        return self.run(x, self.arch)

    def run(self, x: torch.Tensor, arch: Arch) -> torch.Tensor:
        """The output of ``arch``'s path for the batch ``x``."""
        raise NotImplementedError

    def subnet_state(self, arch: Arch) -> dict[str, torch.Tensor]:
        """The state dict of ``space.build(arch, task)`` with every tensor taken (sliced) from this supernet."""
        raise NotImplementedError

    def extremes(self, arch: Arch) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The largest and smallest architectures that keep ``arch``'s unordered decisions; None: no order."""
        return None

    def load_subnet(self, model: torch.nn.Module, arch: Arch) -> torch.nn.Module:
        """``model`` (a standalone ``space.build(arch, task)``) with this supernet's weights for ``arch``."""
        self.space.validate(arch)
        with torch.no_grad():
            model.load_state_dict(self.subnet_state(arch), strict=True)
        return model


__all__ = ["Supernet"]

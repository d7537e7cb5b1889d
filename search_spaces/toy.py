"""A small space with a known optimum, for tests and quick experiments.

Five decisions with five ordered options each (3,125 architectures). :func:`toy_score` is an analytic
objective whose unique maximum (0.0) is :data:`TOY_OPTIMUM`; the space also builds a real MLP, so the
same space runs through the real trainer.

>>> toy_score(TOY_OPTIMUM)
0.0
>>> toy_score({"d0": 0, "d1": 0, "d2": 0, "d3": 0, "d4": 0}) < -10
True
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nas.core.registry import register_space
from nas.core.space import SearchSpace, Task
from nas.core.types import Arch

if TYPE_CHECKING:
    import torch

TOY_OPTIMUM = {"d0": 3, "d1": 1, "d2": 4, "d3": 2, "d4": 3}


def toy_score(arch: Arch) -> float:
    """Minus the squared distance to :data:`TOY_OPTIMUM` (higher is better, 0.0 at the optimum)."""
    return 0.0 - sum((int(arch[k]) - v) ** 2 for k, v in TOY_OPTIMUM.items())


@register_space("toy")
class ToySpace(SearchSpace):
    def dims(self):
        return {f"d{i}": [0, 1, 2, 3, 4] for i in range(5)}

    def build(self, arch: Arch, task: Task) -> torch.nn.Module:
        import torch  # here, not at the top: naming or listing the space imports no torch

        width = 8 * (1 + int(arch["d0"]))
        layers: list[torch.nn.Module] = [torch.nn.Flatten()]
        n_in = math.prod(task.input_shape)
        for _ in range(1 + int(arch["d1"]) % 3):
            layers += [torch.nn.Linear(n_in, width), torch.nn.ReLU()]
            n_in = width
        layers.append(torch.nn.Linear(n_in, task.num_classes))
        return torch.nn.Sequential(*layers)

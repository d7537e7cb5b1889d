"""Learning-rate schedules as closed-form functions of the step: constant, step decay, cosine with linear
warm-up (Loshchilov & Hutter 2017, "SGDR", Eq. 5, without restarts; warm-up as Goyal et al. 2017, Sec. 2.2).

Closed form rather than ``torch.optim.lr_scheduler`` objects: a trial resumed from a checkpoint at any epoch
(PBT, promotion) continues its schedule from the step number alone, with no scheduler state to save.

>>> s = Schedule("cosine", base_lr=0.1, total_steps=100, warmup_steps=10)
>>> round(s.lr(0), 4), round(s.lr(10), 4), round(s.lr(55), 4), round(s.lr(100), 4)
(0.01, 0.1, 0.05, 0.0)
>>> Schedule("step", base_lr=0.1, total_steps=100, step_every=30, gamma=0.1).lr(65)
0.0010000000000000002
"""

from __future__ import annotations

import dataclasses
import math

SCHEDULES = ("constant", "cosine", "step")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """``lr(step)`` for steps 0..total_steps. cosine: linear warm-up over ``warmup_steps`` (from
    base_lr/warmup_steps), then a half cosine from ``base_lr`` to ``min_lr`` at ``total_steps``.
    step: ``base_lr * gamma ** (step // step_every)``. constant: ``base_lr`` (after any warm-up)."""

    kind: str
    base_lr: float
    total_steps: int
    warmup_steps: int = 0
    min_lr: float = 0.0
    step_every: int = 1
    gamma: float = 0.1

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.kind!r}; known: {', '.join(SCHEDULES)}")
        if self.step_every < 1:
            raise ValueError(f"step_every must be >= 1 step, got {self.step_every}")

    def lr(self, step: int) -> float:
        if self.warmup_steps and step < self.warmup_steps:
            return self.base_lr * (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return self.base_lr
        if self.kind == "step":
            return self.base_lr * self.gamma ** (step // self.step_every)
        span = max(1, self.total_steps - self.warmup_steps)
        t = min(1.0, (step - self.warmup_steps) / span)
        return self.min_lr + 0.5 * (self.base_lr - self.min_lr) * (1 + math.cos(math.pi * t))

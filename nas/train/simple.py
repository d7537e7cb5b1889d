"""Training functions that train nothing: a known score per architecture (toy spaces with a known optimum,
strategy studies, tests) and a fixed wait (the per-trial overhead probe of the driver benchmarks). They are
ordinary ``train(ctx)`` functions (:mod:`nas.train.context`), so every executor runs them as it runs real
training, and a worker without data runs them without torch.

>>> from nas.core.types import Trial
>>> from nas.train.context import TrialContext
>>> ctx = TrialContext(Trial(0, {"x": 3}), model=None, data=None, hparams={}, device="cpu")
>>> scored(lambda arch: arch["x"] / 10)(ctx)
>>> ctx.outcome()[0].score
0.3
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from nas.core.types import Arch
from nas.train.context import TrialContext

ScoreFn = Callable[[Arch], float | Mapping[str, float]]


class scored:  # noqa: N801 - used as a function: train=scored(toy_score)
    """A training function that reports ``score_fn(arch)`` once, as ``metric`` (or, when it returns a mapping,
    those metrics), at epoch 1. A class rather than a closure so that it pickles by reference to Ray workers."""

    def __init__(self, score_fn: ScoreFn, metric: str = "val_acc") -> None:
        self.score_fn, self.metric = score_fn, metric

    def __call__(self, ctx: TrialContext) -> None:
        value = self.score_fn(ctx.trial.arch)
        metrics = dict(value) if isinstance(value, Mapping) else {self.metric: float(value)}
        ctx.report(epoch=1, **metrics)

    def __repr__(self) -> str:
        return f"scored({getattr(self.score_fn, '__qualname__', self.score_fn)!r})"


class sleeping:  # noqa: N801 - used as a function: train=sleeping(0.01)
    """A training function that waits ``seconds`` (0: none) and reports ``val_acc`` 0 at epoch 1."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = float(seconds)

    def __call__(self, ctx: TrialContext) -> None:
        if self.seconds:
            time.sleep(self.seconds)
        ctx.report(epoch=1, val_acc=0.0)

    def __repr__(self) -> str:
        return f"sleeping({self.seconds:g})"


def noop(ctx: TrialContext) -> Any:
    """Reports ``val_acc`` 0 at once: the lightest trial there is (the Ray driver benchmarks)."""
    ctx.report(epoch=1, val_acc=0.0)


__all__ = ["noop", "scored", "sleeping"]

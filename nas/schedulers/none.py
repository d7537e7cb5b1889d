"""The scheduler that never intervenes: every trial trains its full epochs (the default).

>>> from nas.schedulers.none import NoScheduler
>>> NoScheduler(max_epochs=5).on_report(0, 1, 0.1).value
'CONTINUE'
"""

from __future__ import annotations

from nas.core.registry import register_scheduler
from nas.core.scheduler import Scheduler
from nas.core.types import Decision


@register_scheduler("none")
class NoScheduler(Scheduler):
    """Always CONTINUE; no options."""

    def __init__(self, *, max_epochs: int, seed: int | None = None) -> None:
        super().__init__(max_epochs=max_epochs, seed=seed)

    def _decide(self, trial_id: int, epoch: int, score: float) -> Decision:
        return Decision.CONTINUE


__all__ = ["NoScheduler"]

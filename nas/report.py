"""``nas report RUN_DIR [RUN_DIR ...]``: one self-contained interactive HTML page (see :mod:`nas.monitor.page`)."""

from __future__ import annotations

from collections.abc import Sequence

from nas.monitor.page import objective_front_section, write_report

__all__ = ["objective_front_section", "pareto_front", "write_report"]


def pareto_front(params: Sequence[float], scores: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats on both fewer parameters and a higher score,
    ordered by parameter count.

    >>> pareto_front([10, 20, 30, 15], [0.5, 0.9, 0.8, 0.4])
    [0, 1]
    """
    order = sorted(range(len(params)), key=lambda i: (params[i], -scores[i]))
    front, best = [], float("-inf")
    for i in order:
        if scores[i] > best:
            front.append(i)
            best = scores[i]
    return front

"""A one-line progress bar for searches: trials done / budget, best score so far, busy workers."""

from __future__ import annotations

import sys
from typing import TextIO

from nas.loop import Callback, SearchLoop
from nas.types import Result, Trial, TrialState


class ProgressBar(Callback):
    """Redraws in place on a terminal; elsewhere (logs, CI) prints a line every tenth of the budget."""

    def __init__(self, stream: TextIO | None = None, width: int = 24) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = self.stream.isatty()
        self._last_tenth = -1

    def line(self, loop: SearchLoop) -> str:
        done, budget = loop.finished, loop.budget
        filled = int(self.width * done / budget)
        bar = "#" * filled + "." * (self.width - filled)
        best = f"{loop.best_score:.4f}" if loop.best_score is not None else "-"
        elapsed = max(loop.elapsed, 1e-9)
        failed = loop.count(TrialState.FAILED)
        slots = loop.executor.slots
        return (f"[{bar}] {done}/{budget} trials | best {best} | busy {min(loop.running, slots)}/{slots}"
                f" | failed {failed} | {done / elapsed:.2f} trials/s")

    def _draw(self, loop: SearchLoop) -> None:
        if self.tty:
            self.stream.write("\r" + self.line(loop))
            self.stream.flush()
            return
        tenth = 10 * loop.finished // loop.budget
        if tenth != self._last_tenth:
            self._last_tenth = tenth
            self.stream.write(self.line(loop) + "\n")
            self.stream.flush()

    def on_start(self, loop: SearchLoop) -> None:
        self._draw(loop)

    def on_submit(self, loop: SearchLoop, trial: Trial) -> None:
        if self.tty:
            self._draw(loop)

    def on_result(self, loop: SearchLoop, trial: Trial, result: Result) -> None:
        self._draw(loop)

    def on_end(self, loop: SearchLoop) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

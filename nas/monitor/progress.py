"""The search's progress display, drawn by tqdm: redrawn in place on a timer on a terminal, plain lines in logs.

On a terminal one line, as wide as the terminal and never wider (it narrows its bar, drops the bar below
about 90 columns, then cuts the text)::

    42%|####      | 10/24 [00:31<00:43, 3.10s/trial], best 0.9812, busy 2/2, queued 1, failed 0

 A thread redraws it every ``refresh`` seconds, so elapsed time and ETA move during
long trials too. When the stream is not a terminal (CI logs, a pipe) the same text, without the bar,
is printed as a line of its own at each tenth of the budget and at least every ``log_interval`` seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from tqdm import tqdm
from tqdm.utils import disp_len

from nas.core.objectives import Objective
from nas.core.types import Result, Trial
from nas.engine.interfaces import Callback, LoopStatus
from nas.engine.protocol import Event

BAR_FORMAT = "{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]{postfix}"
TEXT_FORMAT = "{n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]{postfix}"
MIN_BAR = 10  # narrower than this, the bar says nothing: drop it


class FittingBar(tqdm):  # type: ignore[type-arg]
    """A tqdm bar whose line never exceeds ``ncols``: tqdm narrows a bar but not its text, so a long text
    would wrap and every redraw would stack a new line."""

    @staticmethod
    def format_meter(n: float, total: float, elapsed: float, ncols: int | None = None,
                     bar_format: str | None = None, **kw: Any) -> str:
        if ncols:
            ncols -= 1  # the last column stays free: some terminals wrap on writing it
        if ncols and bar_format and "{bar}" in bar_format:
            text = tqdm.format_meter(n, total, elapsed, ncols=None, bar_format=bar_format.replace("{bar}", ""), **kw)
            if disp_len(text) + MIN_BAR > ncols:
                bar_format = TEXT_FORMAT
        line = tqdm.format_meter(n, total, elapsed, ncols=ncols, bar_format=bar_format, **kw)
        return line[:ncols] if ncols and disp_len(line) > ncols else line  # tqdm trims only bar-less text


def postfix(status: LoopStatus, front: tuple[int, float] | None = None, objective: str | None = None) -> str:
    """``best val_acc 0.9812, busy 2/2, queued 1, failed 0`` for the loop as it is now (``, stopped 3`` once a
    scheduler stopped or paused trials early). ``objective``: the run's first (``metric:mode``), by whose name
    and in whose units the best is shown (None: the bare score, for a loop whose objective is not known).

    >>> from nas.engine.interfaces import LoopStatus
    >>> st = LoopStatus("running", "random", 3, 3, 0, 2, 1, 2, 10, None, 5.0, 9.0, 0.5, 1, 0, 0.0, 4, 0.0,
    ...                 {"STOP": 2}, 0)
    >>> postfix(st)
    'best 0.5000, busy 2/2, queued 1, failed 0, stopped 2'
    >>> postfix(st, front=(4, 0.3125)).endswith("front 4, HV 0.3125")
    True
    >>> import dataclasses
    >>> postfix(dataclasses.replace(st, best_score=-3.5), objective="latency_ms:min")[:20]
    'best latency_ms 3.50'
    """
    best = "-" if status.best_score is None else f"{status.best_score:.4f}"
    if objective is not None and status.best_score is not None:
        o = Objective.parse(objective)
        best = f"{o.metric} {o.score(status.best_score):.4f}"  # (score() turns a minimised metric back)
    text = f"best {best}, busy {status.running}/{status.workers}, queued {status.queued}, failed {status.failed}"
    stopped = sum(status.decisions.values())
    text = f"{text}, stopped {stopped}" if stopped else text
    return text if front is None else f"{text}, front {front[0]}, HV {front[1]:.4g}"  # several objectives


class SearchProgress(Callback):
    """A progress display for :class:`nas.engine.loop.SearchLoop` (``nas search`` shows it unless ``--quiet``).

    >>> import io
    >>> SearchProgress(stream=io.StringIO()).tty
    False
    """

    def __init__(self, stream: TextIO | None = None, *, refresh: float = 1.0, log_interval: float = 30.0,
                 tty: bool | None = None, objectives: Sequence[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.objective = objectives[0] if objectives else None  # (the best shown by its name, in its units)
        self.tty = self.stream.isatty() if tty is None else tty
        self.refresh = refresh
        self.log_interval = log_interval
        self.bar: FittingBar | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._last_tenth = -1
        self._printed = -1  # trials done at the last plain line
        self._total: int | None = None
        self._front: Any = None  # a multi-objective run's Pareto front so far (nas.core.front.FrontTracker)
        # the bar's clock is the loop's (simulated seconds for a simulated executor): its elapsed at the last
        # update, moved on by the wall clock between updates while that clock keeps pace with the wall
        self._elapsed = 0.0
        self._at = time.monotonic()
        self._t0 = self._at
        self._wall_clock = True

    def _now(self) -> float:
        """The bar's time: the loop's elapsed seconds (tqdm's elapsed is ``_time() - start_t``, start_t 0)."""
        return self._elapsed + (time.monotonic() - self._at if self._wall_clock else 0.0)

    # -- the bar -------------------------------------------------------------------------------
    def _update(self, status: LoopStatus) -> None:
        assert self.bar is not None
        with self._lock:
            self._follow(status)
            self.bar.n = status.finished
            self.bar.set_postfix_str(postfix(status, self._front_figures(), self.objective), refresh=False)
        if self.tty:
            self.bar.refresh()
        else:
            tenth = 10 * status.finished // self._total if self._total else -1
            if tenth != self._last_tenth:
                self._last_tenth = tenth
                self._print_line()

    def _follow(self, status: LoopStatus) -> None:
        """Take the loop's clock: a clock that runs ahead of the wall is the executor's own (simulated)."""
        self._at = time.monotonic()
        self._elapsed = status.elapsed
        if status.elapsed > self._at - self._t0 + 1.0:
            self._wall_clock = False

    def _print_line(self) -> None:
        assert self.bar is not None
        with self._lock:
            d = self.bar.format_dict
            line = tqdm.format_meter(**{**d, "ncols": None, "bar_format": TEXT_FORMAT})
            self._printed = self.bar.n
            self.stream.write(line.rstrip() + "\n")
            self.stream.flush()

    def _tick(self) -> None:
        """The timer: redraw (a terminal) or print a line (a log) while trials run."""
        period = self.refresh if self.tty else self.log_interval
        while not self._stop.wait(period):
            if self.bar is None:
                return
            if self.tty:
                self.bar.refresh()
            else:
                self._print_line()

    # -- the loop's hooks ----------------------------------------------------------------------
    def on_start(self, status: LoopStatus) -> None:
        self._total = status.budget
        self._t0 = time.monotonic() - status.elapsed
        self._follow(status)
        # in a log the bar draws nowhere (it keeps the clock and counts; _print_line prints its text)
        self.bar = FittingBar(total=self._total, initial=status.finished, file=self.stream if self.tty else _NullFile(),
                              unit="trial", dynamic_ncols=self.tty, smoothing=0, mininterval=0, leave=True,
                              ascii=" #", bar_format=BAR_FORMAT, postfix=postfix(status, objective=self.objective))
        self.bar._time = self._now
        self.bar.start_t = self.bar.last_print_t = 0.0
        self._update(status)
        self._stop.clear()
        self._thread = threading.Thread(target=self._tick, name="nas-progress", daemon=True)
        self._thread.start()

    def on_submit(self, status: LoopStatus, trial: Trial) -> None:
        if self.bar is not None and self.tty:
            self._update(status)

    def on_event(self, status: LoopStatus, event: Event) -> None:
        if self.bar is not None and self.tty:  # a trial began (busy changes) or reported
            self._update(status)

    def _front_figures(self) -> tuple[int, float] | None:
        return None if self._front is None or not self._front.size else (self._front.size, self._front.hypervolume())

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        from nas.core.front import FrontTracker, front_point

        if (point := front_point(result)) is not None:
            if self._front is None:
                self._front = FrontTracker()
            self._front.add(point)
        if self.bar is not None:
            self._update(status)

    def on_end(self, status: LoopStatus) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.bar is None:
            return
        with self._lock:
            self._follow(status)
            self.bar.n = status.finished
            self.bar.set_postfix_str(postfix(status, self._front_figures(), self.objective), refresh=False)
        if not self.tty and self._printed != status.finished:
            self._print_line()
        self.bar.close()
        self.bar = None


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (where tqdm's notebook bar draws a widget)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class NotebookProgress(Callback):
    """The same counts in tqdm's notebook widget (``tqdm.notebook``), for ``nas.search`` in Jupyter."""

    def __init__(self, objectives: Sequence[str] | None = None) -> None:
        self.bar: Any = None
        self.objective = objectives[0] if objectives else None

    def on_start(self, status: LoopStatus) -> None:
        from tqdm.notebook import tqdm as notebook_tqdm

        self.bar = notebook_tqdm(total=status.budget, initial=status.finished, unit="trial")
        self.bar.set_postfix_str(postfix(status, objective=self.objective))

    def _update(self, status: LoopStatus) -> None:
        if self.bar is not None:
            self.bar.n = status.finished
            self.bar.set_postfix_str(postfix(status, objective=self.objective))  # (refreshes the widget)

    def on_submit(self, status: LoopStatus, trial: Trial) -> None:
        self._update(status)

    def on_event(self, status: LoopStatus, event: Event) -> None:
        self._update(status)

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        self._update(status)

    def on_end(self, status: LoopStatus) -> None:
        self._update(status)
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def api_progress(progress: bool | None, given: Sequence[Callback] = (),
                 objectives: Sequence[str] | None = None) -> list[Callback]:
    """The display ``nas.search(progress=...)`` adds: None (the default) shows one on a terminal or in a
    notebook, True always, False never; none when a display is among the ``given`` callbacks (``nas search``).
    It shows the best of the first of the run's ``objectives`` by its name.

    >>> api_progress(False), api_progress(True, [SearchProgress()])
    ([], [])
    >>> type(api_progress(True)[0]).__name__
    'SearchProgress'
    """
    if progress is False or any(isinstance(cb, (SearchProgress, NotebookProgress)) for cb in given):
        return []
    if in_notebook():
        return [NotebookProgress(objectives)]
    if progress or sys.stderr.isatty():
        return [SearchProgress(objectives=objectives)]
    return []


class _NullFile:
    """Where a log-mode bar draws (nowhere): its lines are printed by :meth:`SearchProgress._print_line`."""

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None: ...

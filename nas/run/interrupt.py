"""Crash-safe runs: resuming a run directory, and a graceful Ctrl-C.

A run directory can be continued after any crash of the driver (SIGKILL included) because of one
ordering, kept by :class:`nas.engine.loop.SearchLoop` and its store (:class:`nas.run.store.RunStore`):

1. a submission is journaled before the trial runs; a result is journaled (and fsynced) before the
   strategy is told of it;
2. every K results or T seconds, between rounds, the strategy's ``state_dict()`` is snapshotted
   atomically with the number of journal records it covers.

Resuming (``nas.search(..., run_dir=RUN, resume=True)`` or ``nas search --resume RUN``) loads the last
snapshot, replays the journal after it (each submission asked again, each result told), and re-queues
what was submitted and never finished, under its own id. The run ends with exactly ``budget`` finished
trials, each trial id journaled once.

>>> stop = StopSignal("wait")
>>> stop.requested, stop.mode
(False, 'wait')
>>> stop.request(); stop.requested
True
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

INTERRUPT_MODES = ("cancel", "wait")


def resume_settings(run_dir: str) -> dict[str, Any]:
    """``run.json`` of ``run_dir`` as :class:`nas.run.config.RunConfig` fields (what ``--resume`` runs)."""
    from nas.run.config import RunConfig
    from nas.run.store import read_config

    cfg = read_config(Path(run_dir))
    values = RunConfig.from_run_json(cfg).to_json()
    values["run_dir"] = run_dir
    return values


class StopSignal:
    """Asks a running :class:`nas.engine.loop.SearchLoop` to stop submitting trials. ``mode`` says what
    becomes of those in flight: ``"cancel"`` stops them (they are re-run on resume), ``"wait"`` lets
    them finish and journals them."""

    def __init__(self, mode: str = "cancel") -> None:
        if mode not in INTERRUPT_MODES:
            raise ValueError(f"unknown interrupt mode {mode!r}; known: {', '.join(INTERRUPT_MODES)}")
        self.mode = mode
        self.requested = False

    def request(self) -> None:
        self.requested = True


@contextlib.contextmanager
def stop_on_sigint(stop: StopSignal, stream: TextIO | None = None) -> Iterator[StopSignal]:
    """While inside, the first SIGINT (Ctrl-C) requests ``stop``; a second raises KeyboardInterrupt
    at once. The previous handler is restored on leaving. Main thread only (as Python's signals)."""
    out = stream or sys.stderr

    def handler(signum: int, frame: object) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()
        what = "cancelling" if stop.mode == "cancel" else "waiting for"
        print(f"\nstopping: no new trials, {what} the running ones (Ctrl-C again aborts at once)",
              file=out, flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)

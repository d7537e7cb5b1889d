"""A graceful stop of a running search: :class:`StopSignal` asks the loop to submit nothing more, cancelling the
trials in flight (a resume re-runs them) or waiting for them; :func:`stop_on_sigint` makes the first Ctrl-C
request it and the second abort at once.

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
from typing import TextIO

INTERRUPT_MODES = ("cancel", "wait")


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

"""A graceful stop of a running search: :class:`StopSignal` asks the loop to submit nothing more, cancelling the
trials in flight (a resume re-runs them) or waiting for them; :func:`stop_on_sigint` makes the first Ctrl-C (or
SIGTERM) request it and the second abort at once. Before the loop runs (Ray and the workers starting, which may
take up to ``start_timeout``), there is nothing to stop gracefully: the first aborts at once.

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
        self.running = False  # set by the loop as it starts: until then a signal aborts (stop_on_sigint)

    def request(self) -> None:
        self.requested = True


@contextlib.contextmanager
def stop_on_sigint(stop: StopSignal, stream: TextIO | None = None) -> Iterator[StopSignal]:
    """While inside, the first SIGINT (Ctrl-C) or SIGTERM (a batch scheduler's or ``kill``'s stop) requests
    ``stop``; a second raises KeyboardInterrupt at once, as does the first one before the loop runs (the executor's
    start waited for the workers, up to ``start_timeout``, with the stop requested and nobody to hear it). The
    previous handlers are restored on leaving. Main thread only (as Python's signals)."""
    out = stream or sys.stderr

    def handler(signum: int, frame: object) -> None:
        if stop.requested or not stop.running:
            raise KeyboardInterrupt
        stop.request()
        what = "cancelling" if stop.mode == "cancel" else "waiting for"
        again = "Ctrl-C again" if signum == signal.SIGINT else "a second SIGTERM"
        print(f"\nstopping{'' if signum == signal.SIGINT else ' (SIGTERM)'}: no new trials, {what} the running "
              f"ones ({again} aborts at once)", file=out, flush=True)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)

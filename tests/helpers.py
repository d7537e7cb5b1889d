"""What several test modules share that is not a fixture (fixtures are in tests/conftest.py): the fast `nas search`
flags, a small custom space's source, a journal file whose writes a test controls, waiting for state another process
owns, and stopping what a test started."""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import time
from collections.abc import Callable
from typing import TypeVar

from nas.engine.interfaces import Callback

T = TypeVar("T")

#: `nas search` on the toy space in this process: one epoch, no progress line
FAST = ["--space", "toy", "--executor", "inprocess", "--epochs", "1", "--quiet"]

#: a module defining ``Tiny``, a custom space (2 x 2 MLPs on 8x8 images), as a user writes one
TINY_SPACE = textwrap.dedent("""
    import torch
    import nas

    class Tiny(nas.SearchSpace):
        def dims(self):
            return {"hidden": [8, 16], "act": ["relu", "tanh"]}

        def build(self, arch, task):
            act = torch.nn.ReLU() if arch["act"] == "relu" else torch.nn.Tanh()
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, arch["hidden"]), act,
                                       torch.nn.Linear(arch["hidden"], task.num_classes))
""")


class JournalFile:
    """A run's journal opened to append, as the store's ``opener`` (a documented run option) hands it over; a
    subclass overrides ``write`` to fail or crash at a planned point."""

    def __init__(self, path) -> None:
        self.f = open(path, "ab")  # noqa: SIM115 (the journal's own file object)

    def write(self, data: bytes) -> int:
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()

    def fileno(self) -> int:
        return self.f.fileno()

    def close(self) -> None:
        self.f.close()


def saving_curve(ctx) -> None:
    """A training function with no model: it keeps its epoch as its checkpoint and goes on from the one it starts
    from (a promotion, a PBT segment) or inherits, reporting a curve that rises towards the architecture's quality."""
    import math

    from nas.search_spaces.toy import toy_score

    start = (ctx.checkpoint.load() or ctx.inherited or {"epoch": 0})["epoch"]
    for epoch in range(start + 1, start + ctx.epochs + 1):
        ctx.checkpoint.save({"epoch": epoch})
        if ctx.report(epoch=epoch, val_acc=math.exp(toy_score(ctx.trial.arch) / 10) * (1 - 0.5**epoch)):
            return


def scored_toy_run(path, budget: int):
    """A finished run in ``path``: ``budget`` toy architectures by random search, in-process, scored by a formula
    (no training): the run directory a test reads, copies or damages."""
    import nas
    from nas.search_spaces.toy import ToySpace, toy_score
    from nas.train.simple import scored

    nas.search(ToySpace(), "random", budget=budget, executor="inprocess", seed=0, data=None, run_dir=path,
               train=scored(toy_score), progress=False)
    return path


def wait_until(check: Callable[[], T], what: str, timeout: float = 60.0, every: float = 0.05) -> T:
    """``check()``'s first true value, asked every ``every`` seconds for at most ``timeout`` (then the test fails,
    naming ``what``). Only for state that can only be asked for: an endpoint or a file another process serves or
    writes on its own schedule; an event this test can hear of (a line on a pipe, a callback) is waited for instead.

    >>> wait_until(lambda: 42, "the answer")
    42
    """
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)  # (the polling interval: no order is forced by it)
    return value


def kill_session(sid: int) -> None:
    """SIGKILL what is left of the processes of session ``sid`` (a process the test started with
    ``start_new_session=True``, and whatever it started: Ray's agents outlive a killed driver); nobody else's."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == sid:
                    os.kill(int(entry), signal.SIGKILL)


class CrashAtEvent(Callback):
    """A callback that stands for the driver dying: it raises ``error`` (a BaseException nothing in the platform
    catches) as the loop hears the ``n``-th event of ``kind`` (a report: after it is journaled; a start: while that
    trial trains on its thread). (A BaseException raised by the training function stood for it; on its own thread
    that is now a failed trial, as on Ray.)"""

    def __init__(self, kind, n, error):
        self.kind, self.n, self.error, self.seen = kind, n, error, 0

    def on_event(self, status, event):
        self.seen += event.kind is self.kind
        if self.seen == self.n:
            raise self.error(f"{self.kind.value} #{self.n}")

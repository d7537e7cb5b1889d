"""The live line's counts come from the executor's events: at every redraw of a scripted run the ``busy`` it
shows is the number of trials running then (in-process: the trials inside their training function; on Ray:
the trials whose ``started`` event the loop heard and whose result it has not), and on Ray it shows ``busy 2/2``
while both workers train (each trial waits until the display has drawn it among two busy workers: an event in a
small Ray actor that the display sets and the trial awaits)."""

from __future__ import annotations

import asyncio
import collections
import io
import re
import sys

import pytest
import ray

import nas
from nas.core.types import Result, Trial
from nas.engine.interfaces import LoopStatus
from nas.engine.protocol import Event, EventKind
from nas.monitor.progress import SearchProgress
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.settings import TrainSettings

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module

BUSY = re.compile(r"busy (\d+)/(\d+), queued (\d+)")
INSIDE: set[int] = set()  # in-process: the trials inside the training function now


@ray.remote(num_cpus=0)
class Gates:
    """One event per trial: the display opens it, the trial awaits it (as Ray's own tests' SignalActor)."""

    def __init__(self) -> None:
        self.events: collections.defaultdict[int, asyncio.Event] = collections.defaultdict(asyncio.Event)

    async def open(self, trial_id: int) -> None:
        self.events[trial_id].set()

    async def wait(self, trial_id: int) -> None:
        await self.events[trial_id].wait()

    async def opened(self) -> list[int]:
        return sorted(t for t, event in self.events.items() if event.is_set())


class Recorder(SearchProgress):
    """The progress display on a (fake) terminal that, after each redraw the loop causes, reads the line it drew
    and checks it against the running trials as the events it heard say; whenever a line shows every worker
    busy, it opens the ``gates`` of the trials running then."""

    def __init__(self, gates=None) -> None:
        super().__init__(io.StringIO(), tty=True, refresh=3600.0)  # redraws on the loop's hooks only
        self.running: set[int] = set()
        self.lines: list[tuple[int, int, int, int]] = []  # (busy shown, workers, queued, running by events)
        self.gates = gates

    def _check(self, status: LoopStatus) -> None:
        assert isinstance(self.stream, io.StringIO)
        busy, workers, queued = map(int, BUSY.findall(self.stream.getvalue())[-1])
        self.lines.append((busy, workers, queued, len(self.running)))
        assert busy == len(self.running) == status.running, (busy, sorted(self.running), status)
        if self.gates is not None and busy == workers:
            for tid in self.running:
                self.gates.open.remote(tid)

    def on_submit(self, status: LoopStatus, trial: Trial) -> None:
        super().on_submit(status, trial)
        self._check(status)

    def on_event(self, status: LoopStatus, event: Event) -> None:
        if event.kind in (EventKind.STARTED, EventKind.REPORT):
            self.running.add(event.trial.trial_id)
        elif event.kind is EventKind.REQUEUED:
            self.running.discard(event.trial.trial_id)
        super().on_event(status, event)
        self._check(status)

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        self.running.discard(trial.trial_id)
        super().on_result(status, trial, result)
        self._check(status)


def counted_train(ctx):
    """Three epochs of the toy score; the trial is in ``INSIDE`` from its first line to its last."""
    INSIDE.add(ctx.trial.trial_id)
    try:
        for epoch in (1, 2, 3):
            ctx.report(epoch=epoch, val_acc=toy_score(ctx.trial.arch) * epoch / 3)
    finally:
        INSIDE.discard(ctx.trial.trial_id)


class InsideRecorder(Recorder):
    def _check(self, status: LoopStatus) -> None:
        super()._check(status)
        assert self.lines[-1][0] == len(INSIDE), (self.lines[-1], INSIDE)  # the truth: who trains now


def test_busy_equals_the_running_trials_at_every_redraw_in_process(tmp_path):
    display = InsideRecorder()
    df = nas.search(ToySpace(), "random", budget=6, workers=2, executor="inprocess", seed=0, data=None,
                    run_dir=tmp_path / "run", train=counted_train, callbacks=[display])
    assert len(df) == 6 and (df.state == "COMPLETE").all()
    assert len(display.lines) >= 6 * 4  # a submit, a redraw per epoch's event and a result per trial
    assert {busy for busy, *_ in display.lines} == {0, 1}  # in process, one trial trains at a time
    assert any(queued == 1 for *_, queued, _ in display.lines)  # the second slot's trial waits, queued


class GatedTrain:
    """Reports its first epoch, then waits until the display has drawn it among two busy workers (its event in
    ``gates``); without that within a minute the trial fails, and the test with it."""

    def __init__(self, gates) -> None:
        self.gates = gates

    def __call__(self, ctx) -> None:
        ctx.report(epoch=1, val_acc=0.1)
        try:
            ray.get(self.gates.wait.remote(ctx.trial.trial_id), timeout=60)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"the display never showed trial {ctx.trial.trial_id} among 2 busy workers") from None
        ctx.report(epoch=2, val_acc=toy_score(ctx.trial.arch))


@pytest.mark.ray
def test_busy_equals_the_running_trials_at_every_redraw_on_ray(ray_local, tmp_path):
    gates = Gates.remote()
    display = Recorder(gates)
    df = nas.search(ToySpace(), "random", budget=4, workers=2, seed=0, data=None, run_dir=tmp_path / "run",
                    train=GatedTrain(gates), callbacks=[display],
                    settings=TrainSettings(epochs=2, measure_costs=False, device="cpu"))
    assert (df.state == "COMPLETE").all(), df.error.tolist()
    assert ray.get(gates.opened.remote()) == list(range(4))
    assert max(busy for busy, *_ in display.lines) == 2
    ray.kill(gates)


def test_the_python_api_shows_progress_unless_told_not_to(tmp_path, capsys):
    for progress, run in ((True, "shown"), (False, "silent")):
        nas.search(ToySpace(), "random", budget=3, executor="inprocess", seed=0, data=None, run_dir=tmp_path / run,
                   train=counted_train, progress=progress)
        err = capsys.readouterr().err
        assert ("3/3 [" in err and "busy 0/2" in err) if progress else "busy" not in err, err

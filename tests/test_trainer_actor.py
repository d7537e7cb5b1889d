"""The Ray trainer actor's own bookkeeping, driven in this process (its class, not a remote actor): a trial trains on
its call's thread, a report waits up to LINGER for the trial's end and goes with the result or else on the stream,
a rung's report goes at once, the count of streamed messages is exact, and the actor's log lines are written by its
one linger thread. The Ray executor's tests drive the same actor remotely."""

from __future__ import annotations

import threading

import pytest

from nas.core.types import Decision, Outcome, Report, Trial
from nas.engine import trainer_actor
from nas.engine.protocol import KeepRule
from nas.engine.trainer_actor import CheckpointNext, Ended, ended_of, hand_over

pytestmark = pytest.mark.ray


def actor(train, name="t0"):
    return trainer_actor.TrainerActor.__ray_actor_class__(name, None, None, None, train, 1)


def take(a, number, trial_id, wait_epochs=frozenset()) -> Ended:
    return ended_of(a.take(hand_over(number, Trial(trial_id, {"x": trial_id}), KeepRule(), wait_epochs)))


def test_a_report_its_trials_end_follows_goes_with_the_result(ray_local, monkeypatch):
    monkeypatch.setattr(trainer_actor, "LINGER", 60.0)  # (the end always comes first)

    def train(ctx):
        ctx.report(epoch=1, val_acc=0.25)
        ctx.report(epoch=2, val_acc=0.5)

    ended = take(actor(train), 0, 7)
    assert ended.result.outcome is Outcome.COMPLETE and ended.streamed == 0
    assert [(r.trial_id, r.epoch, r.metrics["val_acc"], r.worker) for r in ended.reports] == [
        (7, 1, 0.25, "t0"), (7, 2, 0.5, "t0")]


def test_a_report_that_waits_past_linger_goes_on_the_stream_and_is_counted(ray_local):
    seen: list = []

    def train(ctx):
        ctx.report(epoch=1, val_acc=0.25)
        seen.append(next(stream))  # (the trial trains on until its report has gone out)
        ctx.report(epoch=2, val_acc=0.5)

    a = actor(train)
    stream = a.stream()
    ended = take(a, 0, 3)
    assert [(r.trial_id, r.epoch) for r in seen[0]] == [(3, 1)]
    # epoch 2 went with the result, or on the stream where the machine kept the trial from ending within LINGER
    assert ended.streamed + len(ended.reports) == 2 and [r.epoch for r in ended.reports] == [2][:len(ended.reports)]


def test_a_rungs_report_goes_at_once_and_the_trial_waits_for_the_answer(ray_local, monkeypatch):
    monkeypatch.setattr(trainer_actor, "LINGER", 60.0)
    answers: list[bool] = []

    def train(ctx):
        answers.append(ctx.report(epoch=1, val_acc=0.25))  # a rung: waits for the driver's answer (True: stop)
        if not answers[-1]:
            ctx.report(epoch=2, val_acc=0.5)

    a = actor(train)
    stream = a.stream()
    ended: list[Ended] = []
    runner = threading.Thread(target=lambda: ended.append(take(a, 0, 4, frozenset({1}))))
    runner.start()
    item = next(stream)  # (the report is on the stream while the trial waits)
    assert [(r.trial_id, r.epoch) for r in item] == [(4, 1)] and answers == []
    a.decide(4, Decision.STOP)
    runner.join(timeout=30)
    assert ended[0].streamed == 1 and ended[0].reports == () and ended[0].result.outcome is Outcome.STOPPED
    assert answers == [True]


def test_a_kept_checkpoint_follows_the_trials_reports_on_the_stream(ray_local):
    def train(ctx):
        ctx.report(epoch=1, val_acc=0.25)
        ctx.checkpoint.save({"w": 1})

    a = actor(train)
    stream = a.stream()
    ended = ended_of(a.take(hand_over(0, Trial(5, {"x": 5}), KeepRule(save=True), frozenset())))
    items = [next(stream) for _ in range(2)]
    reports = [m for m in items[0] if isinstance(m, Report)]
    assert isinstance(items[0][-1], CheckpointNext) and items[0][-1].trial_id == 5 and isinstance(items[1], bytes)
    assert ended.streamed == 1 + len(reports) and len(reports) + len(ended.reports) == 1


def test_a_base_exception_past_the_runner_fails_the_trial_and_the_worker_goes_on(ray_local):
    def train(ctx):
        if ctx.trial.trial_id == 0:
            raise KeyboardInterrupt
        ctx.report(epoch=1, val_acc=1.0)

    a = actor(train)
    first, second = take(a, 0, 0), take(a, 1, 1)
    assert first.result.outcome is Outcome.FAILED and "KeyboardInterrupt" in first.result.error
    assert second.result.outcome is Outcome.COMPLETE


def test_a_bursts_start_lines_are_all_written_when_the_worker_is_told_to_flush(ray_local, capsys, monkeypatch):
    monkeypatch.setattr(trainer_actor, "WRITE_EVERY", 60.0)  # (after the first, the burst's lines wait)
    a = actor(lambda ctx: ctx.report(epoch=1, val_acc=0.0), name="burst")
    for i in range(3):
        take(a, i, 10 + i)
    a.flush()  # (what the pool asks of each worker before it stops them)
    lines = [line for line in capsys.readouterr().out.splitlines() if " burst: " in line]
    assert [line.split(": ", 1)[1] for line in lines] == [
        f'trial {i} started: {{"x":{i}}}' for i in (10, 11, 12)]


def test_a_start_line_alone_is_written_before_its_trial_trains(ray_local, capsys):
    lines: list[str] = []

    def train(ctx):  # (a worker that dies in its first trial has said which trial it was)
        lines.extend(line for line in capsys.readouterr().out.splitlines() if " alone: " in line)

    take(actor(train, name="alone"), 0, 21)
    assert [line.split(": ", 1)[1] for line in lines] == ['trial 21 started: {"x":21}']

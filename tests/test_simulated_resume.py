"""A simulated run resumed after a crash is the uninterrupted run: the search runs again from its start, each record
checked against the journal, and goes on from its end (:mod:`nas.run.rerun`); its journal ends byte for byte as the
uninterrupted run's, however often it was crashed, at whatever record, with several workers and any scheduler.
Where the search cannot run again (an executor object handed in, a journal the search does not write again) the
journal is replayed instead: the clock goes on from the journal's last time (so a time budget counts the simulated
time already spent and the times stay in order), and a trial a scheduler paused before the crash can still be
promoted (the fresh executor knew nothing of it: "the tabular benchmark answers only 12 or 200-epoch training from
scratch")."""

from __future__ import annotations

import json
import logging

import pytest

import nas
from nas.core.registry import tables
from nas.engine.interfaces import Callback
from nas.engine.loop import SearchLoop
from nas.engine.simulated import SimulatedExecutor
from nas.search_spaces.nb201 import NB201Space
from tests.helpers import JournalFile


class Crash(BaseException):
    """Stands for the driver dying: nothing in the platform catches it."""


class CrashAfter(Callback):
    def __init__(self, results: int) -> None:
        self.left = results

    def on_result(self, status, trial, result):
        self.left -= 1
        if self.left == 0:
            raise Crash


def results(run_dir):
    lines = (json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines())
    return [r["result"] for r in lines if r["kind"] == "result"]


class CrashingJournal(JournalFile):
    """The journal's file, appending as usual, until its ``at``-th record (counted over the run's sessions): that one
    and the lines before it in the same write reach the file, then the driver "dies" (a batch may be torn)."""

    def __init__(self, path, at):
        self.left = at - (path.read_bytes().count(b"\n") if path.exists() else 0)
        super().__init__(path)

    def write(self, data):
        lines = data.splitlines(keepends=True)
        if len(lines) < self.left:
            self.left -= len(lines)
            return self.f.write(data)
        self.f.write(b"".join(lines[:self.left]))
        self.f.flush()
        raise Crash


def search(run_dir, crash_after=None, strategy="evolution", **kw):
    options = {"population": 8, "sample_size": 3} if strategy == "evolution" else {}
    return nas.search("nb201", strategy, executor=kw.pop("executor", "simulated"), seed=0, run_dir=run_dir,
                      progress=False, strategy_options=options,
                      callbacks=[CrashAfter(crash_after)] if crash_after else [], **kw)


def crashed_at(run_dir, record, **kw):
    """The search, its driver dying once the journal holds ``record`` records (True), or ended (False)."""
    try:
        search(run_dir, resume=run_dir.exists(), run_options={"opener": lambda p: CrashingJournal(p, record)}, **kw)
    except Crash:
        return True
    return False


def journal(run_dir):
    return (run_dir / "trials.jsonl").read_bytes()


ASHA = {"scheduler": "asha", "scheduler_options": {"levels": [12, 200], "variant": "promotion"},
        "settings": nas.TrainSettings(epochs=200)}
CASES = {
    "evolution": dict(strategy="evolution"),
    "random-asha-promotion": dict(strategy="random", **ASHA),
    "evolution-asha-stopping": dict(strategy="evolution", **{**ASHA, "scheduler_options": {"levels": [12, 200]}}),
    "local-hyperband": dict(strategy="local", scheduler="hyperband", scheduler_options={"levels": [12, 200]},
                            settings=nas.TrainSettings(epochs=200)),
    # (rl with the median rule was here: on the table it decided nothing, and is refused now)
    "rl-asha-eta2": dict(strategy="rl", scheduler="asha", scheduler_options={"levels": [12, 200], "eta": 2},
                         settings=nas.TrainSettings(epochs=200)),
    "random-time-budget": dict(strategy="random", budget=500, time_budget=1000),
}


@pytest.mark.parametrize("case", CASES)
def test_five_crashes_at_any_record_end_as_the_uninterrupted_run(tmp_path, case):
    """(A resume replayed the journal: the trials running at the crash started again at the resume's clock, and with
    several workers the rest of the run differed: other trials, other scores.)"""
    kw = dict(budget=30, workers=4) | CASES[case]
    search(tmp_path / "whole", **kw)
    whole = journal(tmp_path / "whole")
    records = whole.count(b"\n")
    run = tmp_path / "run"
    points = [3, records // 5, records // 3, records // 2 + 1, records - 2]
    assert all(crashed_at(run, at, **kw) for at in points)
    assert journal(run).count(b"\n") == points[-1]
    assert not crashed_at(run, records + 1, **kw)
    assert journal(run) == whole


def test_a_crashed_run_resumed_with_a_raised_budget_ends_as_the_uninterrupted_run_of_that_budget(tmp_path):
    """The search runs again under the budget its journal was made with, then goes on under the raised one."""
    said = []
    search(tmp_path / "whole", budget=60, workers=4)
    assert crashed_at(tmp_path / "run", 20, budget=30, workers=4)
    search(tmp_path / "run", resume=True, budget=60, workers=4, notify=said.append)
    assert journal(tmp_path / "run") == journal(tmp_path / "whole")
    assert said == ["running the search again up to its journal's end (20 records, each checked) to continue it "
                    "exactly"]


def test_a_run_that_ended_by_itself_is_replayed_and_its_raised_budget_goes_on_from_its_end(tmp_path, caplog,
                                                                                              monkeypatch):
    """(Run again from its start, a finished run cost its whole search once more: 17-25 s against 1 s for a
    600-trial predictor run; and with a raised budget its end differed from the journal's, so it fell back anyway.)"""
    said, again = [], []
    search(tmp_path / "run", budget=20, workers=4)
    ended = journal(tmp_path / "run")
    monkeypatch.setattr(SearchLoop, "fast_forward", lambda loop, caught_up: again.append(loop))
    with caplog.at_level(logging.WARNING, logger="nas.session"):
        df = search(tmp_path / "run", resume=True, budget=30, workers=4, notify=said.append)
    assert not again and not said and not caplog.records  # (replayed: nothing ran again, nothing to warn of)
    assert journal(tmp_path / "run").startswith(ended) and len(df) == 30 and df["trial_id"].is_unique


def test_a_journal_the_search_does_not_write_again_is_replayed(tmp_path, caplog):
    """A journal whose records the search run again does not write (here a score edited by hand; a journal made by
    another version of the table would do it) is resumed as before: replayed, each trial once, the budget met."""
    kw = dict(budget=30, workers=4)
    with pytest.raises(Crash):
        search(tmp_path / "run", crash_after=10, **kw)
    path = tmp_path / "run" / "trials.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"kind":"result"' in line)
    record = json.loads(lines[at])
    record["result"]["score"] = 0.5
    lines[at] = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    with caplog.at_level(logging.WARNING, logger="nas.session"):
        df = search(tmp_path / "run", resume=True, **kw)
    said = [r.getMessage() for r in caplog.records]
    assert any(f"journal's line {at + 1}, run again, the search wrote a result of trial" in m
               and "differs from the journal's in result.score" in m and "replayed instead" in m for m in said), said
    assert len(df) == 30 and df["trial_id"].is_unique
    assert 0.5 in df["score"].tolist()


def test_a_journal_neither_run_again_nor_replayed_is_refused_naming_where_it_first_differed(tmp_path):
    """(The replay's refusal named only its own line: the one the search run again had found was lost.)"""
    kw = dict(budget=30, workers=4)
    with pytest.raises(Crash):
        search(tmp_path / "run", crash_after=10, **kw)
    path = tmp_path / "run" / "trials.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    submits = [i for i, line in enumerate(lines) if b'"kind":"submit"' in line]
    lines[submits[5]], lines[submits[6]] = lines[submits[6]], lines[submits[5]]  # (two proposals swapped)
    path.write_bytes(b"".join(lines))
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    with pytest.raises(ValueError, match=r"cannot resume: replaying the journal \(line \d+\), .* does not replay "
                                         rf"deterministically \(run again from its start, the search first differed "
                                         rf"at the journal's line {submits[5] + 1}, run again, the search wrote a "
                                         r"submit of trial \d+ where the journal has a submit of trial \d+\)"):
        search(tmp_path / "run", resume=True, **kw)
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before


def executor_object(workers, epochs=None):
    """An executor handed in from Python: the search cannot be built again, so a resume replays the journal."""
    return SimulatedExecutor(NB201Space(), tables.get("nb201-cifar10")(), workers=workers, seed=0, epochs=epochs)


def test_a_promotion_of_a_trial_paused_before_the_crash_is_answered(tmp_path):
    """(The resume was refused: the run stayed at 12 of 40.) With one worker it ends as the uninterrupted run."""
    kw = dict(budget=40, scheduler="asha", scheduler_options={"levels": [12, 200], "variant": "promotion"},
              settings=nas.TrainSettings(epochs=200))
    whole = search(tmp_path / "whole", executor=executor_object(1, 200), **kw)
    with pytest.raises(Crash):
        search(tmp_path / "run", crash_after=14, executor=executor_object(1, 200), **kw)
    assert any(r["outcome"] == "PAUSED" for r in results(tmp_path / "run"))
    resumed = search(tmp_path / "run", resume=True, executor=executor_object(1, 200), **kw)
    columns = ["trial_id", "arch", "state", "score", "epochs"]
    assert resumed[columns].sort_values("trial_id").equals(whole[columns].sort_values("trial_id"))
    assert (resumed["epochs"] == 200).any()


def test_the_clock_goes_on_from_the_journal_and_the_time_budget_counts_it(tmp_path):
    """(The resumed clock started at 0 again: a fresh 1,000 simulated s on top of those spent, and times ran
    backwards.)"""
    kw = dict(budget=500, time_budget=1000)
    with pytest.raises(Crash):
        search(tmp_path / "run", crash_after=10, executor=executor_object(4), **kw)
    before = results(tmp_path / "run")
    last = max(r["end_time"] for r in before)
    df = search(tmp_path / "run", resume=True, executor=executor_object(4), **kw)
    assert df.attrs["summary"]["utilization"] > 0.9  # (the trials replayed counted: it read 0.65)
    after = results(tmp_path / "run")[len(before):]
    assert after and min(r["start_time"] for r in after) >= last
    assert max(r["end_time"] for r in after) < 1000 + 250  # (the budget ends it; a trial still running may end it)


def test_status_of_a_resumed_simulated_run_counts_every_trial_over_its_clock(tmp_path):
    """(It divided this session's trials by the whole simulated clock: 0.003 trials/s where the run did 0.027.)"""
    from nas.monitor.status import run_status

    assert crashed_at(tmp_path / "run", 30, budget=40, workers=4)
    search(tmp_path / "run", resume=True, budget=40, workers=4)
    st = run_status(tmp_path / "run")
    assert st["finished"] == 40 and st["throughput"] == pytest.approx(40 / st["elapsed"])

"""Resume after a crash or an interrupt: nothing lost, nothing duplicated.

In-process tests crash the driver at chosen points (a BaseException the platform does not catch, like
a kill, raised from the strategy or the trainer) and check that the resumed run's journal is exactly the
uninterrupted run's. Subprocess tests kill a real `nas search` on a real Ray cluster with SIGKILL and
SIGINT, then resume it from the command line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import nas
from nas.engine.inprocess import InProcessExecutor
from nas.engine.protocol import EventKind
from nas.engine.stop import StopSignal, stop_on_sigint
from nas.run.journal import read_records
from nas.run.reader import read_journal
from nas.run.snapshot import read_snapshot
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.evolution import RegularizedEvolution
from nas.train.settings import TrainSettings
from nas.train.simple import scored
from tests.helpers import CrashAtEvent, kill_session, wait_until

OPTIONS = {"population": 6, "sample_size": 3}
BUDGET = 24


class Crash(BaseException):
    """Stands for the process dying: nothing in the platform catches it."""


class CrashingEvolution(RegularizedEvolution):
    """Regularized evolution that 'dies' at its n-th ask or tell (registered name: still evolution)."""

    def __init__(self, space, *, at, **kw):
        super().__init__(space, **kw)
        self.at, self.calls = at, {"ask": 0, "tell": 0}

    def _count(self, what):
        self.calls[what] += 1
        if self.at == (what, self.calls[what]):
            raise Crash(f"{what} #{self.calls[what]}")

    def ask(self):
        self._count("ask")
        return super().ask()

    def tell(self, trial, result):
        self._count("tell")  # the result is already journaled: the crash comes before the tell
        super().tell(trial, result)


def run(tmp_path, strategy="evolution", *, resume=False, budget=BUDGET, **kw):
    ex = InProcessExecutor(ToySpace(), None, train=scored(toy_score), slots=3)
    return nas.search(ToySpace(), strategy, budget=budget, executor=ex, seed=3, strategy_options=OPTIONS,
                      run_dir=tmp_path / "run", resume=resume, **kw)


def journal_rows(path):
    return [(t.trial_id, nas.arch_key(t.arch), r.state.value, r.score) for t, r in read_journal(path / "run")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("reference")
    run(path)
    return journal_rows(path)


@pytest.mark.parametrize("crash", [("ask", 2), ("ask", 11), ("tell", 1), ("tell", 9), ("trial", 7),
                                   ("trial", BUDGET)])
def test_resume_after_a_crash_gives_the_uninterrupted_run(tmp_path, reference, crash):
    what, n = crash
    with pytest.raises(Crash):
        if what == "trial":
            run(tmp_path, callbacks=[CrashAtEvent(EventKind.STARTED, n, Crash)])
        else:
            run(tmp_path, CrashingEvolution(ToySpace(), at=crash, seed=3, **OPTIONS))
    finished_before = len(journal_rows(tmp_path))
    assert finished_before < BUDGET
    df = run(tmp_path, resume=True)
    assert len(df) == BUDGET and df.trial_id.is_unique
    assert journal_rows(tmp_path) == reference  # same trials, same order, same scores: nothing lost or doubled
    assert df.attrs["summary"]["resumed"] == finished_before


def test_two_crashes_and_a_torn_journal_line(tmp_path, reference):
    with pytest.raises(Crash):
        run(tmp_path, CrashingEvolution(ToySpace(), at=("tell", 5), seed=3, **OPTIONS))
    with pytest.raises(Crash):
        run(tmp_path, CrashingEvolution(ToySpace(), at=("ask", 6), seed=3, **OPTIONS), resume=True)
    journal = tmp_path / "run" / "trials.jsonl"
    whole = journal.read_bytes()
    journal.write_bytes(whole + whole.splitlines(keepends=True)[-1][:40])  # a record cut mid-write
    (tmp_path / "run" / ".snapshot.json.tmp123").write_bytes(b"half a snap")  # an atomic write cut short
    run(tmp_path, resume=True)
    assert journal_rows(tmp_path) == reference


def test_raising_the_budget_and_resuming_a_finished_run(tmp_path):
    first = run(tmp_path, budget=10)
    assert first.trial_id.tolist() == list(range(10))
    rows = journal_rows(tmp_path)
    again = run(tmp_path, budget=10, resume=True)
    assert len(again) == 10 and again.attrs["summary"]["resumed"] == 10 and journal_rows(tmp_path) == rows
    more = run(tmp_path, budget=BUDGET, resume=True)
    assert sorted(more.trial_id) == list(range(BUDGET))
    assert journal_rows(tmp_path)[:10] == rows
    assert json.loads((tmp_path / "run" / "run.json").read_text())["search"]["budget"] == BUDGET


@pytest.mark.parametrize("mode", ["cancel", "wait"])
def test_stop_request_cancels_or_awaits_in_flight_trials(tmp_path, reference, mode):
    stop = StopSignal(mode)

    class StopAtThree(nas.Callback):
        def on_result(self, status, trial, result):
            if status.finished == 3:
                stop.request()

    df = run(tmp_path, stop=stop, callbacks=[StopAtThree()])
    assert df.attrs["interrupted"]
    records = list(read_records(tmp_path / "run" / "trials.jsonl"))
    finished = {r.trial.trial_id for r in records if r.kind == "result"}
    unfinished = [r.trial.trial_id for r in records if r.kind == "submit" and r.trial.trial_id not in finished]
    if mode == "wait":  # the two other running trials finished and were journaled
        assert len(df) == 5 and unfinished == []
    else:  # cancelled: submitted but not finished in the journal, re-run on resume
        assert len(df) == 3 and unfinished == [3, 4]
    snapshot = read_snapshot(tmp_path / "run" / "snapshot.json")  # the stop's final snapshot covers it all
    assert snapshot["told"] == len(df) and snapshot["records"] == len(records)
    run(tmp_path, resume=True)
    if mode == "cancel":  # the same trials in the same order as if nothing had happened
        assert journal_rows(tmp_path) == reference
    else:  # awaiting changes when the strategy hears of trials 3 and 4, so later asks differ
        assert sorted(row[0] for row in journal_rows(tmp_path)) == list(range(BUDGET))


def test_first_sigint_requests_a_stop_and_the_second_aborts(capsys):
    stop, before = StopSignal("wait"), signal.getsignal(signal.SIGINT)
    stop.running = True  # (as the loop sets it when it starts)
    with pytest.raises(KeyboardInterrupt), stop_on_sigint(stop):
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        os.kill(os.getpid(), signal.SIGINT)
    assert "Ctrl-C again aborts at once" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before


def test_a_sigint_before_the_loop_runs_aborts_at_once(capsys):
    """Before the loop runs (the workers starting, up to start_timeout) no loop would hear a requested stop."""
    stop = StopSignal()
    with pytest.raises(KeyboardInterrupt), stop_on_sigint(stop):
        os.kill(os.getpid(), signal.SIGINT)
    assert not stop.requested and "stopping" not in capsys.readouterr().err


# -- a real `nas search` killed, then resumed ---------------------------------------------------------
GATED_SPACE = """
    import os
    import torch
    import nas

    GATE = "GATE_DIR"  # the test's folder: a ticket per build, and the FIFO "open" that the test opens to let all go

    class Slow(nas.SearchSpace):
        '''The first FREE builds go at once; each later one waits until the test opens the gate, so the search
        is certain to be mid-way (trials running, more to come) when the test kills or stops it.'''

        def dims(self):
            return {"hidden": [8, 16, 32], "act": ["relu", "tanh"], "depth": [1, 2]}

        def build(self, arch, task):
            ticket = 0
            while True:  # the next ticket, taken atomically across the workers' processes
                try:
                    os.close(os.open(os.path.join(GATE, f"ticket-{ticket}"), os.O_CREAT | os.O_EXCL))
                    break
                except FileExistsError:
                    ticket += 1
            if ticket >= FREE:  # opening a FIFO to read waits until it is open to write: until the test opens the gate
                os.close(os.open(os.path.join(GATE, "open"), os.O_RDONLY))
            layers, width = [torch.nn.Flatten()], 64
            for _ in range(arch["depth"]):
                layers += [torch.nn.Linear(width, arch["hidden"]), torch.nn.ReLU()]
                width = arch["hidden"]
            return torch.nn.Sequential(*layers, torch.nn.Linear(width, task.num_classes))
"""


def cli(tmp_path, *argv, free=0):
    """``nas search ARGV`` in a new process, in ``tmp_path`` (Ray ships the driver's directory, and so
    the space module there, to its workers); the space's first ``free`` builds go at once, the rest wait for
    ``gate``."""
    gate = tmp_path / "gate"
    gate.mkdir(exist_ok=True)
    if not (gate / "open").exists():
        os.mkfifo(gate / "open")
    source = textwrap.dedent(GATED_SPACE).replace("GATE_DIR", str(gate)).replace("FREE", str(free))
    (tmp_path / "slowspace.py").write_text(source)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen([sys.executable, "-m", "nas.cli", "search", *argv], env=env, text=True, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


@pytest.fixture
def gate(tmp_path):
    """Called, it lets every build of the gated space go on, those waiting and those to come: it holds the gate's
    FIFO open to write (read-write, which Linux opens at once) to the end of the test."""
    held = []
    yield lambda: held.append(os.open(tmp_path / "gate" / "open", os.O_RDWR))
    for fd in held:
        os.close(fd)


def wait_for_journal(proc, run_dir, lines, timeout=240.0):
    """Until the journal (another process's file) holds ``lines`` results; the search must still be running."""
    journal = run_dir / "trials.jsonl"

    def written() -> bool:
        assert proc.poll() is None, f"the search ended early: {proc.communicate()}"
        return journal.exists() and journal.read_bytes().count(b'"kind":"result"') >= lines  # finished trials

    try:
        wait_until(written, f"{lines} results in {journal}", timeout=timeout)
    except AssertionError:
        proc.kill()
        raise


def finish(proc, timeout=300):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, out, err


SEARCH = ["--space", "slowspace:Slow", "--strategy", "evolution", "--workers", "2", "--epochs", "1",
          "-o", "population=4", "-o", "sample_size=2", "--quiet"]


@pytest.mark.ray
def test_sigkill_mid_search_then_resume_with_the_python_api(tmp_path, ray_local, monkeypatch, gate):
    """`nas search` without --address starts its own Ray, which dies with it when it is SIGKILLed; the
    Python API resumes the run on another cluster (the session's)."""
    run_dir, budget = tmp_path / "run", 14
    proc = cli(tmp_path, *SEARCH, "--budget", str(budget), "--run-dir", str(run_dir), free=3)
    wait_for_journal(proc, run_dir, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    kill_session(proc.pid)
    before = [t.trial_id for t, _ in read_journal(run_dir)]
    assert len(before) == 3  # the rest waited at the gate
    gate()
    monkeypatch.syspath_prepend(str(tmp_path))
    import slowspace  # the module of the space, shipped to this session's workers by value

    ray_local.cloudpickle.register_pickle_by_value(slowspace)
    df = nas.search("slowspace:Slow", "evolution", budget=budget, workers=2, seed=0, run_dir=run_dir,
                    strategy_options={"population": 4, "sample_size": 2}, settings=TrainSettings(epochs=1),
                    resume=True)
    after = [t.trial_id for t, _ in read_journal(run_dir)]
    assert after[:len(before)] == before and df.attrs["summary"]["resumed"] == len(before)
    assert sorted(after) == list(range(budget)) == sorted(df.trial_id)  # the budget: none lost, none twice


@pytest.mark.ray
def test_sigint_stops_gracefully_and_prints_how_to_resume(tmp_path, ray_local, gate):
    """On a running cluster (the session's), as with `ray start` and `--address`."""
    run_dir, budget = tmp_path / "run", 10
    address = ["--address", ray_local.get_runtime_context().gcs_address]
    proc = cli(tmp_path, *SEARCH, *address, "--budget", str(budget), "--run-dir", str(run_dir), free=1)
    wait_for_journal(proc, run_dir, 1)
    proc.send_signal(signal.SIGINT)
    code, _, err = finish(proc)
    done = [t.trial_id for t, _ in read_journal(run_dir)]
    assert code == 130, err
    assert f"interrupted: {len(done)} trials finished; resume with: nas search --resume {run_dir}" in err
    assert len(done) == 1  # the rest waited at the gate
    records = list(read_records(run_dir / "trials.jsonl"))
    unfinished = {r.trial.trial_id for r in records if r.kind == "submit"} - set(done)
    # cancelled, kept for the resume: 2 workers, each running one trial and holding one queued (prefetch)
    assert 1 <= len(unfinished) <= 4
    assert read_snapshot(run_dir / "snapshot.json")["told"] == len(done)
    gate()
    code, out, err = finish(cli(tmp_path, "--resume", str(run_dir), "--budget", str(budget + 2), "--quiet",
                                *address))
    assert code == 0, err
    assert sorted(t.trial_id for t, _ in read_journal(run_dir)) == list(range(budget + 2))

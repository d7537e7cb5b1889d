"""The run directory's owner (nas.run): one writer, a write-ahead journal read strictly, snapshots with
replay, best.json and best.pt in step, refusals that change nothing, a full disk, and the config object.
No Ray: the in-process executor and the toy space."""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import re
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

import nas
from nas.cli import main
from nas.core.types import Outcome, Result, Trial
from nas.engine.inprocess import InProcessExecutor
from nas.run.config import RunConfig
from nas.run.journal import DiskFull, read_records
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.run.store import RunStore
from nas.search_spaces.nb201 import NB201Space
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.simple import scored
from tests.helpers import JournalFile

TOY = scored(toy_score)
OPTIONS = {"population": 6, "sample_size": 3}


def toy_train(ctx):
    """The toy score as a top-level function: run.json records it by import path, so the CLI resumes it too."""
    TOY(ctx)


def run(path, *, budget=20, resume=False, **kw):
    ex = InProcessExecutor(ToySpace(), None, train=toy_train, slots=3)
    return nas.search(ToySpace(), "evolution", budget=budget, executor=ex, train=toy_train, data=None, seed=3,
                      strategy_options=OPTIONS, run_dir=path, resume=resume, **kw)


def rows(path):
    return [(t.trial_id, nas.arch_key(t.arch), r.state.value, r.score) for t, r in nas.run.reader.read_journal(path)]


def tree(path: Path) -> dict[str, str]:
    """Every file of a run directory and a hash of its bytes (the lock's own files aside)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and not p.name.startswith(".lock")}


def one_line_error(capsys, argv, message):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.fixture
def finished(tmp_path):
    run(tmp_path / "run", budget=12)
    return tmp_path / "run"


# -- one writer ---------------------------------------------------------------------------------------
def test_a_second_writer_fails_at_once_naming_the_holder(tmp_path, capsys):
    store = RunStore.create(tmp_path / "run", {"space": "toy", "budget": 1})
    try:
        with pytest.raises(ValueError, match=rf"in use by another search \(pid \d+ on host {socket.gethostname()}"):
            run(tmp_path / "run", resume=True)
        one_line_error(capsys, ["search", "--space", "toy", "--executor", "inprocess", "--quiet", "--run-dir",
                                str(tmp_path / "run")], "is in use by another search (pid")
    finally:
        store.close()
    with pytest.raises(ValueError, match="already holds a run"):  # released: now the run itself refuses
        run(tmp_path / "run")


def test_a_holder_whose_recorded_pid_has_ended_is_said_to_be_starting_or_resuming(tmp_path):
    """(A resume running its search again writes nothing until it has matched the journal: a second resume then named
    the pid of the search killed before, as if it still ran.)"""
    store = RunStore.create(tmp_path / "run", {"space": "toy", "budget": 1})
    try:
        holder = tmp_path / "run" / ".lock.json"
        said = json.loads(holder.read_text())
        ended = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # (no process can have it)
        holder.write_text(json.dumps({**said, "pid": ended}))
        with pytest.raises(ValueError, match=rf"in use by another search \(one that is starting or resuming: it has "
                                             rf"not written its pid yet; .lock.json still names pid {ended}, which has "
                                             r"ended\)"):
            run(tmp_path / "run", resume=True)
    finally:
        store.close()


# -- the journal, read strictly -------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "message"), [
    (b"not json\n", "line 3 is not a journal record (not JSON)"),
    (b"[1, 2]\n", "line 3 is not a journal record (expected an object with kind"),
    (b'{"kind": "resulting", "trial": {"trial_id": 1}}\n', "line 3 is not a journal record"),
    (b'{"kind": "result", "trial": {"trial_id": 1, "arch": {}}}\n', "line 3 is a result record of the wrong shape"),
    (b'{"kind": "submit", "trial": {"trial_id": "one", "arch": {}}}\n', "line 3 is a submit record of the wrong"),
])
def test_a_bad_line_in_the_middle_is_an_error_naming_file_and_line(finished, capsys, bad, message):
    journal = finished / "trials.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:2]) + bad + b"".join(lines[2:]))
    before = tree(finished)
    with pytest.raises(ValueError, match=re.escape(f"{journal} {message}")):
        nas.load_results(finished)
    for command in ("results", "best", "status"):
        one_line_error(capsys, [command, str(finished)], message)
    with pytest.raises(ValueError, match=re.escape(message)):
        run(finished, budget=12, resume=True)
    assert tree(finished) == before  # a refused resume changed nothing


def test_a_duplicate_result_is_an_error_naming_its_line(finished, capsys):
    journal = finished / "trials.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if b'"kind":"result"' in ln)
    journal.write_bytes(b"".join(lines) + lines[first])
    one_line_error(capsys, ["results", str(finished)], f"line {len(lines) + 1} holds a second result for trial")
    with pytest.raises(ValueError, match=f"line {len(lines) + 1} holds a second result"):
        run(finished, budget=12, resume=True)


def test_a_torn_last_line_is_cut_and_nothing_else(finished):
    journal = finished / "trials.jsonl"
    whole = journal.read_bytes()
    journal.write_bytes(whole + whole.splitlines(keepends=True)[-1][:30])
    assert rows(finished) == rows(finished) and len(rows(finished)) == 12  # read: the torn tail is ignored
    run(finished, budget=14, resume=True)
    assert journal.read_bytes().startswith(whole) and len(rows(finished)) == 14


# -- snapshots and replay ------------------------------------------------------------------------------
class Crash(BaseException):
    """Stands for the process dying: nothing in the platform catches it."""


def test_snapshots_every_k_results_and_a_crash_resumes_by_replay(tmp_path):
    reference = tmp_path / "ref"
    run(reference, budget=30)

    class CrashAt(nas.Callback):
        def on_result(self, status, trial, result):
            if status.finished == 17:
                raise Crash

    with pytest.raises(Crash):
        run(tmp_path / "run", budget=30, callbacks=[CrashAt()], run_options={
            "snapshot_every": 5, "snapshot_seconds": 1e9, "snapshot_share": None})
    snap = read_snapshot(tmp_path / "run" / "snapshot.json")
    assert 10 <= snap["told"] < 17 and snap["records"] < len(list(read_records(tmp_path / "run" / "trials.jsonl")))
    df = run(tmp_path / "run", budget=30, resume=True)
    assert rows(tmp_path / "run") == rows(reference)  # the same trials in the same order: nothing lost or doubled
    assert df.trial_id.is_unique and len(df) == 30


def test_a_snapshot_newer_than_the_journal_is_refused(finished, capsys):
    snap = read_snapshot(finished / "snapshot.json")
    write_snapshot(finished / "snapshot.json", {**snap, "records": snap["records"] + 5})
    before = tree(finished)
    with pytest.raises(ValueError, match=r"snapshot.json is newer than the journal: it covers \d+ journal records"):
        run(finished, budget=14, resume=True)
    one_line_error(capsys, ["search", "--resume", str(finished), "--budget", "14"], "is newer than the journal")
    assert tree(finished) == before


def test_snapshots_hold_no_pickle(finished):
    from nas.run.snapshot import read_snapshot

    json.loads((finished / "snapshot.json").read_bytes())  # plain JSON (arrays, where any, in safetensors)
    assert read_snapshot(finished / "snapshot.json")["strategy"] == "evolution"
    assert not (finished / "strategy.pkl").exists()


# -- refusals change nothing ---------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "message"), [
    ({"seed": 4}, "seed: run has 3, this call 4"),
    ({"budget": 5}, "budget may only be raised"),
    ({"settings": nas.TrainSettings(epochs=2)}, "epochs: run has 5, this call 2"),
])
def test_a_refused_resume_changes_nothing_on_disk(finished, change, message):
    before = tree(finished)
    kw = {"budget": 12, **change}
    ex = InProcessExecutor(ToySpace(), None, train=TOY, slots=3)
    with pytest.raises(ValueError, match=message):
        nas.search(ToySpace(), "evolution", executor=ex, strategy_options=OPTIONS, run_dir=finished, resume=True,
                   **{"seed": 3, **kw})
    assert tree(finished) == before


def test_a_parameterised_space_is_recorded_and_rebuilt_exactly(tmp_path):
    from nas.core.spec import space_from_spec

    space = NB201Space(channels=8)
    record = RunConfig.from_mapping({"space": "nb201", "space_args": space.spec()["args"], "strategy": "random",
                                     "budget": 3})
    RunStore.create(tmp_path / "r", record).close()
    saved = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (saved["search"]["space"], saved["search"]["space_args"]) == ("nb201", {"channels": 8})
    assert space_from_spec(RunConfig.from_json(saved).search.space_spec()).channels == 8
    other = record.updated({"space_args": NB201Space(channels=16).spec()["args"]})
    with pytest.raises(ValueError, match=r"space_args: run has \{'channels': 8\}, this call \{'channels': 16\}"):
        RunStore.resume(tmp_path / "r", other)


def test_datasets_with_one_name_but_other_content_are_other_runs(tmp_path):
    for folder, offset in (("a", 0.0), ("b", 1.0)):
        (tmp_path / folder).mkdir()
        rng = np.random.default_rng(0)
        np.savez(tmp_path / folder / "data.npz", x=rng.normal(size=(40, 1, 4, 4)).astype(np.float32) + offset,
                 y=np.arange(40) % 3)
    kw = {"budget": 2, "executor": "inprocess", "train": TOY, "run_dir": tmp_path / "run"}
    nas.search(ToySpace(), "random", data=str(tmp_path / "a" / "data.npz"), **kw)
    with pytest.raises(ValueError, match="it is a different search .*dataset.*dataset_fingerprint: run has"):
        nas.search(ToySpace(), "random", data=str(tmp_path / "b" / "data.npz"), resume=True, **kw)


# -- best.json and best.pt -----------------------------------------------------------------------------
def _ckpt(value: float) -> bytes:
    buf = io.BytesIO()
    torch.save({"model": {"w": torch.full((2,), value)}, "epoch": 1}, buf)
    return buf.getvalue()


def test_best_pt_always_matches_best_json_after_a_resume(tmp_path):
    store = RunStore.create(tmp_path / "run", {"space": "toy", "budget": 1})
    a, b = Trial(0, {"a": 1}), Trial(1, {"a": 2})
    ok = functools.partial(Result, outcome=Outcome.COMPLETE)
    store.on_best(a, ok(0, score=0.5), _ckpt(0.5))
    (tmp_path / "run" / "best.pt").write_bytes(_ckpt(0.9))  # as if a crash came between the two writes
    store.keep_checkpoint(1, _ckpt(0.9), {1})
    store.fix_best((b, ok(1, score=0.9)))  # the journal's best is trial 1, whose checkpoint was kept
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    assert best["trial_id"] == 1 and best["weights_sha256"] == hashlib.sha256(_ckpt(0.9)).hexdigest()
    assert torch.load(tmp_path / "run" / "best.pt", weights_only=True)["model"]["w"][0] == pytest.approx(0.9)
    store.fix_best((a, ok(0, score=1.0)))  # no kept checkpoint of trial 0: the weights go, the pair agrees
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    assert best["trial_id"] == 0 and best["weights"] is None and not (tmp_path / "run" / "best.pt").exists()
    store.close()


def test_a_kept_checkpoint_that_is_not_plain_data_is_refused(tmp_path):
    store = RunStore.create(tmp_path / "run", {"space": "toy", "budget": 1})
    import pickle

    store.keep_checkpoint(3, pickle.dumps(Path("x")), {3})  # a pickle that is not tensors and plain data
    with pytest.raises(ValueError, match=r"3\.pt is not a plain checkpoint"):
        store.kept_checkpoints()
    store.close()


# -- a full disk -----------------------------------------------------------------------------------------
class FullAfter(JournalFile):
    """A journal file whose writes fail with ENOSPC once ``n`` have succeeded (a disk filling up)."""

    def __init__(self, path, n):
        super().__init__(path)
        self.n = n

    def write(self, data):
        if self.n == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.n -= 1
        return self.f.write(data)


def test_a_full_disk_stops_with_one_line_and_the_journal_resumes(tmp_path):
    reference = tmp_path / "ref"
    run(reference, budget=20)
    with pytest.raises(DiskFull, match=r"^No space left on device \(.*\): .* free some space, then resume with: nas "
                                       r"search --resume"):
        run(tmp_path / "run", budget=20, run_options={"opener": lambda p: FullAfter(p, 25)})
    done = rows(tmp_path / "run")
    assert 0 < len(done) < 20 and done == rows(reference)[:len(done)]  # intact up to the failure
    run(tmp_path / "run", budget=20, resume=True)
    assert rows(tmp_path / "run") == rows(reference)


# -- one config object -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("values", "message"), [
    ({"amp": "false"}, "config key 'amp' must be a boolean (true or false), got 'false' (str)"),
    ({"budget": "10"}, "config key 'budget' must be an integer, got '10' (str)"),
    ({"lr": "fast"}, "config key 'lr' must be a number, got 'fast' (str)"),
    ({"max_retries": -1}, "config key 'max_retries' must be an integer >= 0, got -1"),
    ({"workers": True}, "config key 'workers' must be an integer, got True (bool)"),
    ({"strategy_options": [1]}, "config key 'strategy_options' must be a table (mapping), got [1] (list)"),
])
def test_a_wrong_typed_config_value_is_one_line_naming_key_and_type(tmp_path, capsys, values, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RunConfig.from_mapping(values)
    (tmp_path / "c.toml").write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items()
                                              if not isinstance(v, list)) or 'strategy_options = "x"')
    if not isinstance(next(iter(values.values())), list):
        one_line_error(capsys, ["search", "--config", str(tmp_path / "c.toml"), "--run-dir", str(tmp_path / "r")],
                       message)
        assert not (tmp_path / "r").exists()


def test_nas_search_checks_its_arguments_with_the_config(tmp_path):
    with pytest.raises(ValueError, match="config key 'max_retries' must be an integer >= 0, got -1"):
        nas.search(ToySpace(), "random", executor="inprocess", max_retries=-1, run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_run_json_is_the_config_and_the_cli_resumes_it(tmp_path, capsys):
    argv = ["search", "--space", "toy", "--executor", "inprocess", "--quiet", "--strategy", "random",
            "--budget", "3", "--seed", "5", "--run-dir", str(tmp_path / "r")]
    assert main(argv) == 0
    saved = json.loads((tmp_path / "r" / "run.json").read_text())
    assert saved["format"] == 3 and RunConfig.from_json(saved).search.seed == 5
    search, train = saved["search"], saved["train"]
    assert (search["space"], search["space_args"], train["function"]) == ("toy", {}, "builtin")
    assert main(["search", "--resume", str(tmp_path / "r"), "--budget", "5", "--quiet"]) == 0
    assert sorted(t.trial_id for t, _ in nas.run.reader.read_journal(tmp_path / "r")) == list(range(5))


# -- reads never run code ----------------------------------------------------------------------------------
def test_read_only_commands_never_import_the_runs_space(finished, tmp_path, capsys, monkeypatch):
    marker = tmp_path / "marker"
    (tmp_path / "evilspace.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass Space: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = json.loads((finished / "run.json").read_text())
    cfg["search"]["space"] = "evilspace:Space"
    (finished / "run.json").write_text(json.dumps(cfg))
    for command in ("results", "best", "status"):
        assert main([command, str(finished)]) == 0
    assert '"d0": ' in capsys.readouterr().out  # architectures as canonical JSON
    assert not marker.exists()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: s["payload"]["state"].__setitem__("population", "x"),
     "snapshot.json: the strategy's state does not fit RegularizedEvolution (TypeError"),
    (lambda s: s["payload"]["state"].__setitem__("population", [{"arch": 1}]),
     "snapshot.json: the strategy's state does not fit RegularizedEvolution"),
    (lambda s: s["payload"]["state"].pop("population"), "snapshot.json: the strategy's state does not fit"),
])
def test_a_hand_edited_strategy_state_refuses_the_resume_in_one_line(finished, capsys, edit, message):
    snap = json.loads((finished / "snapshot.json").read_text())
    edit(snap)
    (finished / "snapshot.json").write_text(json.dumps(snap))
    before = tree(finished)
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        run(finished, budget=14, resume=True)
    assert "\n" not in str(info.value) and tree(finished) == before


def test_a_report_of_a_run_json_with_a_wrongly_typed_strategy_option_is_still_drawn(finished, tmp_path, capsys):
    cfg = json.loads((finished / "run.json").read_text())
    cfg["search"]["strategy_options"] = {"population": "x"}
    (finished / "run.json").write_text(json.dumps(cfg))
    assert main(["report", str(finished), "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize(("key", "value", "message"), [
    ("strategy", "nope", "run.json: unknown strategy 'nope'"),
    ("space", "nope", "run.json: unknown search space 'nope'"),
])
def test_a_resume_names_run_json_when_its_options_are_bad(finished, capsys, key, value, message):
    cfg = json.loads((finished / "run.json").read_text())
    cfg["search"][key] = value
    (finished / "run.json").write_text(json.dumps(cfg))
    before = tree(finished)
    one_line_error(capsys, ["search", "--resume", str(finished), "--quiet"], message)
    assert tree(finished) == before

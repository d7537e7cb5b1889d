"""What a run directory holds is read against one schema per record kind: a journal line or a status.json of valid
JSON but a wrong type, a missing field or a number out of range makes every command (results, best, status, report,
a resume) fail with one line naming the file, the line and the field; never a traceback. A dead run is "died",
whatever pid its status.json names: liveness is the run's lock."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import nas
from nas.cli import main
from nas.run.lock import RunLock
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.simple import scored

COMMANDS = [["results"], ["best"], ["status"], ["report"]]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("base") / "run"
    nas.search(ToySpace(), "random", budget=4, executor="inprocess", seed=0, run_dir=run_dir, data=None,
               train=scored(toy_score))
    return run_dir


@pytest.fixture
def run_copy(finished, tmp_path):
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


def one_line(capsys, argv, *fragments):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


def edit_result(run_dir, **fields):
    """Set ``fields`` in the first result record's result (then the journal goes on: the line is not the last)."""
    journal = run_dir / "trials.jsonl"
    lines = journal.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if '"kind":"result"' in line)
    record = json.loads(lines[i])
    record["result"].update(fields)
    lines[i] = json.dumps(record)
    journal.write_text("\n".join(lines) + "\n")
    return i + 1


@pytest.mark.parametrize(("fields", "field"), [
    ({"score": "0.93"}, "result.score: Expected `float | null`, got `str`"),
    ({"history": "epoch 1"}, "result.history: Expected `array`, got `str`"),
    ({"epoch": 10**30}, "result.epoch: Expected `int` <= 9223372036854775807"),
    ({"metrics": [1]}, "result.metrics: Expected `object`, got `array`"),
    ({"outcome": None}, "result.outcome: Expected `str`, got `null`"),
    # (each was a TypeError traceback from the table's or the report's number format)
    ({"metrics": {"latency_ms": {"a": 1}}}, "result.metrics.latency_ms: expected a number or null, got dict"),
    ({"metrics": {"params": [1, 2]}}, "result.metrics.params: expected a number or null, got list"),
    ({"metrics": {"params": "big"}}, "result.metrics.params: expected a number or null, got str"),
    # (a duration of inf: "Out of range float values are not JSON compliant" from --format json, naming nothing)
    ({"start_time": -1e308, "end_time": 1e308}, "result.end_time: 1e+308 and start_time -1e+308 are no times"),
])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_wrongly_typed_journal_field_is_one_line_from_every_command(run_copy, capsys, fields, field, command):
    line = edit_result(run_copy, **fields)
    one_line(capsys, [*command, str(run_copy)], f"trials.jsonl line {line} ", field)


DEEP = "[" * 100_000 + "]" * 100_000  # (msgspec and json raise RecursionError, which no reader caught)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_json_nested_too_deeply_is_one_line_from_every_command(run_copy, capsys, command):
    journal = run_copy / "trials.jsonl"
    lines = journal.read_text().splitlines()
    lines[1] = lines[1].replace('"hparams":{', f'"hparams":{{"deep":{DEEP},', 1)
    journal.write_text("\n".join(lines) + "\n")
    one_line(capsys, [*command, str(run_copy)], "trials.jsonl line 2 is not a journal record (nested too deeply)")


def test_a_status_or_run_json_nested_too_deeply_is_one_line(run_copy, capsys):
    status = run_copy / "status.json"
    saved = status.read_text()
    status.write_text(saved.replace("{", f'{{"x":{DEEP},', 1))
    for command in (["status"], ["report"]):
        one_line(capsys, [*command, str(run_copy)], "status.json: not a status (nested too deeply)")
    status.write_text(saved)
    (run_copy / "run.json").write_text(DEEP)
    for command in COMMANDS:
        one_line(capsys, [*command, str(run_copy)], "run.json is corrupt: maximum recursion depth exceeded")


@pytest.mark.parametrize("name", ["trials.jsonl", "status.json", "snapshot.json"])
@pytest.mark.parametrize("kind", ["a FIFO", "a folder"])
def test_a_runs_file_that_is_no_regular_file_is_one_line_not_a_hang(run_copy, capsys, name, kind):
    """A FIFO: every reader waited in open() for a writer, forever (a resume even ignored SIGTERM there); a folder:
    an IsADirectoryError traceback."""
    path = run_copy / name
    path.unlink(missing_ok=True)
    os.mkfifo(path) if kind == "a FIFO" else path.mkdir()
    said = f"{name} is {kind}, not a regular file: a run directory's files are plain files"
    readers = {"trials.jsonl": COMMANDS, "status.json": [["status"], ["report"]], "snapshot.json": []}[name]
    for command in readers:
        one_line(capsys, [*command, str(run_copy)], said)
    if name == "status.json":
        return  # (a resume writes it, never reads it: over a FIFO by a rename, and a folder is "Is a directory")
    with pytest.raises(ValueError, match=said):
        nas.search(ToySpace(), "random", budget=6, executor="inprocess", seed=0, run_dir=run_copy, data=None,
                   train=scored(toy_score), resume=True)


@pytest.mark.parametrize("section", ["search", "train", "execution"])
def test_a_run_json_without_a_section_is_one_line_not_the_defaults(run_copy, capsys, section):
    """It was read as the defaults: the readers showed the default space and objectives, and a resume said
    "has budget 24" (the default) of a run of budget 3, or resumed and wrote the default execution back."""
    cfg = json.loads((run_copy / "run.json").read_text())
    del cfg[section]
    (run_copy / "run.json").write_text(json.dumps(cfg))
    for command in [*COMMANDS, ["search", "--resume"]]:
        one_line(capsys, [*command, str(run_copy)], f"run.json: missing section '{section}'; format 3 has 'search', "
                                                     "'train', 'execution'")


def test_a_list_arch_refuses_the_resume_naming_the_field(run_copy):
    journal = run_copy / "trials.jsonl"
    lines = journal.read_text().splitlines()
    record = json.loads(lines[0])
    record["trial"]["arch"] = [1, 2]
    journal.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"trials.jsonl line 1 .*trial.arch: Expected `object`, got `array`"):
        nas.search(ToySpace(), "random", budget=6, executor="inprocess", seed=0, run_dir=run_copy, data=None,
                   train=scored(toy_score), resume=True)


@pytest.mark.parametrize(("key", "value", "field"), [
    ("pid", "0", "pid: Expected `int` >= 1"),
    ("pid", "-1", "pid: Expected `int` >= 1"),
    ("pid", '"123"', "pid: Expected `int`, got `str`"),
    ("running", '"2"', "running: Expected `int`, got `str`"),
    ("updated", "1e999", "updated: Number out of range"),
    ("state", "null", "state: Expected `str`, got `null`"),
])
def test_a_wrongly_typed_status_json_is_one_line(run_copy, capsys, key, value, field):
    status = run_copy / "status.json"
    text = json.dumps({**json.loads(status.read_text()), key: "@@"}).replace('"@@"', value)  # (1e999: JSON text)
    status.write_text(text)
    for command in (["status"], ["report"]):
        one_line(capsys, [*command, str(run_copy)], "status.json: ", field)


def test_a_dead_run_is_died_whatever_pid_it_names_and_a_live_one_running(run_copy, capsys):
    import os

    status = run_copy / "status.json"
    live = json.loads(status.read_text())
    status.write_text(json.dumps({**live, "state": "running", "pid": os.getpid()}))  # a live pid, not the writer
    assert main(["status", str(run_copy)]) == 0
    assert "state     died" in capsys.readouterr().out
    lock = RunLock(run_copy).acquire()  # now a search holds the run
    try:
        assert main(["status", str(run_copy)]) == 0
        assert "state     running" in capsys.readouterr().out
    finally:
        lock.release()

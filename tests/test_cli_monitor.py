"""`nas results` (table, CSV, JSON, parquet with a column per decision), `nas strategies` / `nas spaces`
with options and defaults, clean help texts, `nas --version`, and the Grafana dashboard in the package."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import socket
from pathlib import Path

import pandas as pd
import pytest

import nas
from nas.cli import build_parser, main
from nas.monitor.live import LivePages
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.settings import TrainSettings
from nas.train.simple import scored

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Six toy MLPs really trained on digits (1 epoch): metrics with parameter counts, per-epoch history."""
    path = tmp_path_factory.mktemp("results") / "run"
    nas.search(ToySpace(), "evolution", budget=6, executor="inprocess", seed=0, run_dir=path,
               strategy_options={"population": 3, "sample_size": 2},
               settings=TrainSettings(epochs=1, batch_size=128, seed=0))
    return path


def test_results_table_is_aligned_with_units(run_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # a wide terminal: every column
    assert main(["results", str(run_dir), "--top", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    header, rule, rows = out[0], out[1], out[2:6]
    assert header.split() == ["trial", "val_acc", "state", "epochs", "ended", "time", "(s)", "params", "FLOPs",
                              "latency", "(ms)", "worker", "parent", "arch"]  # the objective by its name
    assert set(rule) <= {"-", " "} and "<NA>" not in "\n".join(out)
    ends = {col: header.index(col) + len(col) for col in ("val_acc", "params")}
    for row in rows:  # numbers right-aligned under their headers
        assert re.fullmatch(r" *0\.\d{1,4}", row[ends["val_acc"] - 7:ends["val_acc"]]), row
        assert re.fullmatch(r"[ \d,]*\d", row[ends["params"] - 7:ends["params"]]), row
    assert "6 trials: 6 complete, 0 failed (best 4 shown" in out[-1]


def test_results_csv_json_and_parquet_have_a_column_per_decision(run_dir, tmp_path, capsys):
    assert main(["results", str(run_dir), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 6 and records[0]["score"] >= records[-1]["score"]  # best first
    assert records[0]["val_acc"] == records[0]["score"] and "scores" not in records[0]
    assert isinstance(records[0]["metrics"], dict) and isinstance(records[0]["history"], list)  # real objects
    assert {f"arch_d{i}" for i in range(5)} <= set(records[0]) and records[0]["params"] > 0
    assert main(["results", str(run_dir), "--format", "csv"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(csv) == 6 and csv.arch_d0.between(0, 4).all()
    parquet = tmp_path / "t.parquet"
    assert main(["results", str(run_dir), "--parquet", str(parquet), "--csv", str(tmp_path / "t.csv")]) == 0
    frame = pd.read_parquet(parquet)
    assert [c for c in frame if c.startswith("arch_")] == [f"arch_d{i}" for i in range(5)]
    assert frame.arch_d0.dtype.kind == "i" and (frame.params > 0).all()
    assert len(json.loads(frame.history[0])) == 1  # the learning curve, one record per epoch


def test_strategies_and_spaces_list_options_with_defaults(capsys):
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "options: population=50, sample_size=10, dedup=False" in out
    assert "options: sampler='tpe', startup=10" in out and "seed" not in out
    assert main(["spaces"]) == 0
    out = capsys.readouterr().out
    assert "nb201  (15,625 architectures)" in out and "options: channels=16, cells_per_stage=1" in out


def test_the_schedulers_listed_options_are_what_each_takes_with_the_defaults_shown(capsys):
    """(Every scheduler listed max_epochs=None: not an option, `--scheduler-option max_epochs=5` is refused; the
    run's --epochs sets it.)"""
    from nas.core.scheduler import make_scheduler

    assert main(["schedulers"]) == 0
    blocks = re.split(r"\n(?=\S)", capsys.readouterr().out.strip())
    assert [b.split("\n")[0] for b in blocks] == ["asha", "hyperband", "median", "none"]
    for block in blocks:
        name, listed = block.split("\n")[0], re.findall(r"^    options: (.*)$", block, re.M)
        shown = dict(pair.split("=", 1) for pair in listed[0].split(", ")) if listed else {}
        assert "max_epochs" not in shown and (shown or name == "none")
        make_scheduler(name, max_epochs=9, options={k: eval(v) for k, v in shown.items()})  # (reprs of defaults)


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_help_texts_are_plain_and_name_each_default_once():
    for parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "``" not in text and ":class:" not in text and ":func:" not in text, text[:300]
        for action in parser._actions:
            help_ = action.help or ""
            assert "(default: None)" not in help_ and help_.count("(default") <= 1, (parser.prog, help_)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and re.fullmatch(r"nas-ray \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_grafana_dashboard_ships_in_the_package(capsys):
    assert main(["dashboard", "--grafana"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((ROOT / "dashboards" / "nas.json").read_text())
    assert main(["dashboard"]) == 2


def test_the_report_imports_no_user_code(tmp_path, monkeypatch):
    """A run of a module:attr space: the report reads it without importing the module."""
    (tmp_path / "userspace_never_imported.py").write_text("raise SystemExit('user code ran')\n")
    run = tmp_path / "run"
    nas.search(ToySpace(), "random", budget=3, executor="inprocess", run_dir=run,
               data=None, train=scored(toy_score))
    cfg = json.loads((run / "run.json").read_text())
    cfg["search"]["space"] = "userspace_never_imported:Space"
    (run / "run.json").write_text(json.dumps(cfg))
    monkeypatch.syspath_prepend(str(tmp_path))
    from nas.monitor.page import write_report

    page = write_report(run).read_text()
    assert "d0" in page  # architectures shown as their JSON decisions


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_watch_intervals_are_finite_and_positive(run_dir, capsys, value):
    """(--watch inf reached time.sleep's OverflowError.)"""
    assert main(["status", str(run_dir), "--watch", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--watch must be a finite number of seconds > 0, got {float(value)}"), err


def _promoting_run(path):
    """A simulated ASHA search that promotes: trials with a second result, reports, submissions of each kind."""
    nas.search("nb201", "random", budget=40, executor="simulated", workers=4, seed=0, run_dir=path, progress=False,
               scheduler="asha", scheduler_options={"levels": [12, 200], "variant": "promotion"},
               settings=TrainSettings(epochs=200))
    return path


def test_status_read_on_by_a_kept_tail_equals_a_whole_read_and_parses_each_line_once(tmp_path, monkeypatch):
    """(`nas status --watch` read and framed the whole journal for every redraw: 3.4-4.0 s each at 100,000 trials.)
    The journal grows under the reader, a torn last line included; what the kept reader says at the end is what a
    whole read says, and each line was parsed once."""
    import nas.run.journal as journal
    from nas.monitor.status import run_status
    from nas.run.journal import ResultsTail

    whole = _promoting_run(tmp_path / "whole")
    data = (whole / "trials.jsonl").read_bytes()
    grown = tmp_path / "grown"
    grown.mkdir()
    (grown / "run.json").write_bytes((whole / "run.json").read_bytes())
    parsed, real = [], journal._parse
    tail = ResultsTail(grown / "trials.jsonl")
    for cut in (0, len(data) // 3, len(data) // 3 + 7, 2 * len(data) // 3, len(data)):  # (the +7: a torn line)
        (grown / "trials.jsonl").write_bytes(data[:cut])
        with monkeypatch.context() as m:
            m.setattr(journal, "_parse", lambda path, n, line: parsed.append(n) or real(path, n, line))
            st = run_status(grown, tail=tail)
        assert st["finished"] == len(nas.load_results(grown))
    keys = ["finished", "complete", "failed", "stopped", "best_score", "best_trial", "best_arch"]
    assert {k: st[k] for k in keys} == {k: run_status(whole)[k] for k in keys}
    assert st["stopped"] > 0 and st["complete"] > 0  # (paused trials, and promoted ones that completed)
    assert parsed == list(range(1, data.count(b"\n") + 1))  # each line once, in order


def test_status_refuses_a_line_that_is_no_record_and_reads_a_replaced_journal_from_its_start(tmp_path):
    from nas.monitor.status import run_status
    from nas.run.journal import ResultsTail

    run = _promoting_run(tmp_path / "run")
    path = run / "trials.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    tail = ResultsTail(path)
    assert run_status(run, tail=tail)["finished"] == 40
    path.write_bytes(b"".join(lines[:10]))  # (another run in the folder: shorter)
    assert run_status(run, tail=tail)["finished"] == sum(b'"kind":"result"' in line for line in lines[:10])
    path.write_bytes(b"".join([*lines[:10], b'{"kind":"submit" oops\n', *lines[10:]]))
    with pytest.raises(ValueError, match=r"trials.jsonl line 11 is not a journal record \(not JSON\)"):
        run_status(run, tail=tail)
    first = next(i for i, line in enumerate(lines) if b'"kind":"result"' in line)
    path.write_bytes(b"".join([*lines, lines[first]]))  # (a trial finished twice, not promoted: as nas results says)
    with pytest.raises(ValueError, match=rf"line {len(lines) + 1} holds a second result for trial \d+ \(the first "
                                         rf"is on line {first + 1}\); the journal is corrupt"):
        run_status(run)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "0.5", "2.5", "1e-9"])
def test_the_live_page_reloads_after_whole_seconds(run_dir, capsys, value):
    """(--refresh inf served a page told to reload every inf s; 1e-9 and 0.5 one that a browser reloads at once, in a
    loop: a meta refresh counts whole seconds.)"""
    assert main(["serve", str(run_dir), "--refresh", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--refresh must be a whole number of seconds >= 1 (a browser reloads a page after whole "
                        f"seconds: 0.5 is 0, a reload loop), got {float(value)}"), err
    assert "content='1000000'" in LivePages(run_dir, refresh=1e6).index()  # (not 1e+06, which a browser reads as 1)


def test_the_live_page_of_a_run_with_no_trial_running_leaves_no_dangling_example(run_dir):
    """(It read "A page per trial: trial/ID, e.g. " and nothing after.)"""
    page = LivePages(run_dir, refresh=5).index()
    assert "trial/ID</a></p>" in page and "e.g. </p>" not in page


class MixedOptions(nas.SearchSpace):
    """Options of every JSON kind in one decision (a space may offer any JSON data)."""

    def dims(self):
        return {"block": [1, "wide", {"kind": "res", "widths": [8, 16]}, [3, 3]], "depth": [1, 2]}

    def build(self, arch, task):
        raise NotImplementedError  # (scored, never built)


def test_a_run_whose_choices_are_tables_and_lists_is_shown_and_exported(tmp_path, capsys):
    """The report drew nothing but a TypeError (unhashable dict) and the parquet export failed on the column's
    mixed types; the decision's column now holds a table or list choice as its JSON text."""
    from nas.train.simple import scored

    run = tmp_path / "run"
    nas.search(MixedOptions(), "random", budget=8, executor="inprocess", seed=0, data=None, run_dir=run,
               train=scored(lambda arch: float(arch["depth"])))
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
    assert main(["results", str(run), "--parquet", str(tmp_path / "r.parquet")]) == 0
    stored = pd.read_parquet(tmp_path / "r.parquet")
    assert set(stored["arch_block"]) <= {"1", "wide", '{"kind": "res", "widths": [8, 16]}', "[3, 3]"}
    assert len(stored) == 8 and "Traceback" not in capsys.readouterr().err


def test_a_report_of_one_run_named_twice_is_refused(run_dir, tmp_path, capsys):
    assert main(["report", str(run_dir), f"{run_dir}/", "--out", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.strip() == (f"nas report: error: '{run_dir}/' names the same run as '{run_dir}'; "
                                               "compare different runs")
    assert not (tmp_path / "r.html").exists()


def test_serve_on_a_port_in_use_is_one_line(run_dir, capsys):
    """(a port another program listens on ended in the http.server's OSError traceback.) The socket is bound on
    loopback by the test and closed by it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(run_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"nas serve: error: cannot serve on 127.0.0.1:{port}: Address already in use; leave --port out "
                   "for a free one"), err


def test_the_live_page_is_rebuilt_no_more_often_than_twice_its_build_time(run_dir, tmp_path, monkeypatch):
    """(Every change of the journal rebuilt the whole page: a 200,000-trial run's took 50 s, so a live run's page
    was never current and each reload cost a build.) A change rebuilds it once twice the last build's time has passed;
    a trial's page reads the run once per change of its files."""
    import shutil

    import nas.run.reader

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    now = [0.0]
    pages = LivePages(run, refresh=5, clock=lambda: now[0])
    builds = []

    def build():
        builds.append(now[0])
        now[0] += 40  # (a build of 40 s)
        return f"page {len(builds)}"

    monkeypatch.setattr(pages, "_index", build)
    assert pages.index() == "page 1"
    mtime = (run / "trials.jsonl").stat().st_mtime_ns
    os.utime(run / "trials.jsonl", ns=(mtime, mtime + 10**9))  # (a change of the journal)
    now[0] += 30
    assert pages.index() == "page 1"  # 30 s after a 40 s build: the page as it was
    now[0] += 60
    assert pages.index() == "page 2" and builds == [0.0, 130.0]
    reads = []
    load = nas.run.reader.load_run
    monkeypatch.setattr(nas.run.reader, "load_run", lambda d: reads.append(d) or load(d))
    assert pages.trial(0) is not None and pages.trial(1) is not None and len(reads) == 1


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_results_as_json_are_written_in_pieces_that_make_the_whole_text(n):
    """(nas results --format json made every record and the whole text at once: 11 KB per trial, 2.35 GB for
    200,000 trials.) The pieces, of two records here, join to json.dumps of the records."""
    from nas.monitor.tables import json_chunks

    df = pd.DataFrame({"a": [float("nan"), *range(1, n)][:n], "metrics": [{"x": [i, None]} for i in range(n)]})
    records = [{"a": None if i == 0 else float(i), "metrics": {"x": [i, None]}} for i in range(n)]
    assert "".join(json_chunks(df, rows=2)) == json.dumps(records, indent=1)


class Wide(nas.SearchSpace):
    """A space of 500 decisions: its architectures' text is about 8 KB."""

    def dims(self):
        return {f"decision_{i}": [0, 1] for i in range(500)}


def test_status_shows_a_wide_architecture_cut_saying_where_the_whole_is(tmp_path, capsys):
    """(A space of 2,000 decisions made `nas status` print a line of 23 KB.)"""
    run = tmp_path / "run"
    nas.search(Wide(), "random", budget=2, executor="inprocess", data=None, train=scored(lambda a: 1.0),
               run_dir=run, progress=False)
    capsys.readouterr()
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) < 500
    assert f"characters in all: nas best {run})" in out

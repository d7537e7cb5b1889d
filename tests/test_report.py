"""`nas status` and `nas report` on a real (small, in-process, really trained) run."""

from __future__ import annotations

import json
import os
import re
import time

import pandas as pd
import pytest

import nas
from nas.cli import main
from nas.monitor.page import write_report
from nas.monitor.status import format_status, run_status
from nas.run.config import RunConfig
from nas.run.store import STATUS as STATUS_FILE
from nas.search_spaces.toy import ToySpace
from nas.train.settings import TrainSettings

BUDGET = 6


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Regularized evolution over the toy space's real MLPs on digits, 1 epoch each, in this process."""
    path = tmp_path_factory.mktemp("report") / "run"
    nas.search(ToySpace(), "evolution", budget=BUDGET, executor="inprocess", seed=0, run_dir=path,
               strategy_options={"population": 3, "sample_size": 2},
               settings=TrainSettings(epochs=1, batch_size=128, seed=0))
    return path


def test_status_of_a_finished_run(run_dir, capsys):
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "state     finished" in out
    assert f"trials    {BUDGET}/{BUDGET} finished: {BUDGET} COMPLETE, 0 FAILED; 0 RUNNING, 0 QUEUED" in out
    assert re.search(r"best      val_acc 0\.\d{1,4} \(trial \d+\): d0=", out)
    assert re.search(r"speed     \d+\.\d{3} trials/s", out) and "ETA" not in out
    assert main(["status", str(run_dir), "--watch", "5"]) == 0  # not running: prints once, returns


def test_status_of_a_running_and_of_a_killed_run(run_dir, tmp_path):
    from nas.run.lock import RunLock

    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("run.json", "trials.jsonl"):
        (copy / name).write_bytes((run_dir / name).read_bytes())
    live = json.loads((run_dir / STATUS_FILE).read_text())
    now = live["updated"] + 2.0
    # a live writer (this process, holding the run's lock) with a budget of 10: 4 trials left at the run's rate
    (copy / STATUS_FILE).write_text(json.dumps({**live, "state": "running", "budget": 10, "running": 1,
                                                "pid": os.getpid()}))
    lock = RunLock(copy).acquire()
    try:
        st = run_status(copy, now=now)
    finally:
        lock.release()
    assert st["state"] == "running" and st["running"] == 1 and st["left"] == 4
    assert st["eta"] == pytest.approx(4 / st["throughput"])
    assert "ETA" in format_status(st) and "(4 trials left)" in format_status(st)
    # the writer is gone without saying so: its lock is free, though its recorded pid now names a live process
    st = run_status(copy, now=now)
    assert st["state"] == "died" and st["eta"] is None and st["running"] == 0
    assert st["unfinished"] == 0 and "did not finish" not in format_status(st)
    # two trials it had submitted when it died ("0 RUNNING" said nothing of them)
    with (copy / "trials.jsonl").open("a") as f:
        for tid in (100, 101):
            f.write(json.dumps({"kind": "submit", "trial": {"trial_id": tid, "arch": {"d0": 0, "d1": 0, "d2": 0,
                                                                                     "d3": 0, "d4": 0}}}) + "\n")
    st = run_status(copy, now=now)
    assert st["unfinished"] == 2 and (f"note      2 trials were submitted and did not finish; a resume runs them "
                                      f"again (nas search --resume {copy})") in format_status(st).splitlines()


def test_report_is_one_offline_page_with_every_section(run_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--out", str(out), "--top", "3"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    assert "https://" not in page.split("</script>", 2)[-1][:200] and page.count("Plotly.newPlot") >= 7
    for title in ("Best val_acc so far and every trial", "Learning curves", "Genealogy",
                  "Decisions against val_acc",
                  "Decision importance", "Population age", "Worker timeline", "Best architectures (top 3)",
                  "Failed trials (0)", "Trial detail", "Run configuration"):
        assert f"<h3>{title}</h3>" in page, title
    assert "Pareto front and hypervolume" not in page  # one objective: the multi-objective hook adds nothing
    table = page[page.index("<table id='run0-trials'"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == BUDGET + 1 and "params" in table
    assert re.search(r"<td>\d{1,3}(,\d{3})+</td>", table)  # real parameter counts


def test_the_front_hook_only_shows_for_several_objectives():
    import pandas as pd

    from nas.monitor.page import objective_front_section

    assert objective_front_section(RunConfig(), pd.DataFrame()) == ""
    two = RunConfig.from_mapping({"objectives": ["val_acc:max", "latency_ms:min"]})
    assert "Pareto front" in objective_front_section(two, pd.DataFrame())


def test_report_default_path_and_bad_input(run_dir, tmp_path, capsys):
    assert write_report(run_dir) == run_dir / "report.html"
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert main(["report", str(run_dir), "--top", "0"]) == 2
    assert main(["status", str(run_dir), "--watch", "0"]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "run.json").write_text((run_dir / "run.json").read_text())
    assert main(["report", str(empty)]) == 2
    assert "no finished trial yet" in capsys.readouterr().err
    assert main(["status", str(empty)]) == 0  # a run that has not finished a trial yet
    assert f"0/{BUDGET} finished" in capsys.readouterr().out


def test_pareto_front_keeps_only_undominated_points():
    df = pd.DataFrame({"trial_id": range(5), "state": "COMPLETE", "params": [100, 50, 200, 50, 400],
                       "score": [0.8, 0.6, 0.9, 0.7, 0.85]})
    front = nas.pareto_front(df, ["params:min", "score"])
    assert front.trial_id.tolist() == [3, 0, 2]


def test_status_file_is_written_while_the_loop_runs(tmp_path):
    """The status file exists (state running) before the first trial finishes."""
    seen = []

    class Peek(nas.Callback):
        def on_result(self, status, trial, result):
            if not seen:
                seen.append(json.loads((tmp_path / "run" / STATUS_FILE).read_text()))

    from nas.search_spaces.toy import toy_score
    from nas.train.simple import scored

    start = time.time()
    nas.search(ToySpace(), "random", budget=3, executor="inprocess", run_dir=tmp_path / "run", callbacks=[Peek()],
               data=None, train=scored(toy_score))
    assert seen[0]["state"] == "running" and seen[0]["budget"] == 3 and seen[0]["started"] >= start - 1
    assert json.loads((tmp_path / "run" / STATUS_FILE).read_text())["state"] == "finished"


def test_tables_of_trials_show_at_most_their_cap(monkeypatch, run_dir):
    """(A 100,000-trial run's trial table was 31 MB of its page.) The best TABLE_ROWS rows, and where the rest are."""
    from nas.monitor import page

    monkeypatch.setattr(page, "TABLE_ROWS", 2)
    html_text = page.report_html([run_dir])
    trials = html_text[html_text.index("<h3>Trial detail</h3>"):]
    trials = trials[:trials.index("</table>")]
    assert "the best 2 of " in trials and trials.count("<tr>") == 1 + 2  # (the head and two rows)

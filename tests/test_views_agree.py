"""The views agree on runs in odd states (a prober's findings): a multi-objective run where every trial was
infeasible, tied best scores, a population too large for numpy, a warm start named by a relative path and resumed
from another folder, and a config file that gives one option in both spellings."""

from __future__ import annotations

import io

import pandas as pd
import pytest

import nas
from nas.cli import main
from nas.monitor import figures
from nas.monitor.page import write_report
from nas.monitor.status import run_status
from nas.search_spaces.toy import ToySpace
from nas.train.simple import scored


def test_a_multi_objective_run_of_infeasible_trials_is_viewed_not_refused(tmp_path, capsys):
    """(Every view said "objective metric 'val_acc' is in no row of the results", exit 2: `nas search` after its
    search, `nas status`, `nas report`, `nas serve`.)"""
    run = tmp_path / "run"
    assert main(["search", "--space", "toy", "--executor", "inprocess", "--epochs", "1", "--budget", "3", "--quiet",
                 "--objective", "val_acc", "--objective", "params:min", "--max-params", "1", "--run-dir",
                 str(run)]) == 0
    assert "no trial completed" in capsys.readouterr().out
    st = run_status(run)
    assert st["finished"] == 3 and st["complete"] == 0 and st["front_size"] == 0
    assert write_report(run, tmp_path / "page.html").exists()


def test_tied_best_scores_name_one_trial_in_every_view(tmp_path, capsys):
    """(`nas best` and `nas status` named the first trial to finish; `nas results` and the report's table another.)"""
    run = tmp_path / "run"
    nas.search(ToySpace(), "random", budget=40, executor="inprocess", data=None, seed=0, run_dir=run, progress=False,
               train=scored(lambda a: (a["d0"] + a["d1"]) % 3 / 2))  # (three scores: ties at the top)
    df = nas.load_results(run)
    first = int(df.trial_id[df.score.idxmax()])  # (the first of the best to finish)
    capsys.readouterr()
    assert main(["results", str(run), "--format", "csv"]) == 0
    assert int(pd.read_csv(io.StringIO(capsys.readouterr().out)).trial_id.iloc[0]) == first
    assert run_status(run)["best_trial"] == first
    assert main(["best", str(run)]) == 0 and f"trial {first}" in capsys.readouterr().out


def test_a_population_larger_than_numpy_takes_is_drawn(tmp_path):
    """(`-o population=9223372036854775808` was accepted; the report's population-age figure ended in OverflowError.)"""
    df = pd.DataFrame({"trial_id": range(4), "state": "COMPLETE", "parent": [None, 0, 1, 2], "arch": "a",
                       "start_time": [0.0, 1.0, 2.0, 3.0], "end_time": [1.0, 2.0, 3.0, 4.0]})
    fig = figures.population_age(df, 2**63)
    assert list(fig.data[1].y) == [0.0, 0.5, 1.0, 1.5]  # (the whole run so far: its mean age)


def test_a_relative_warm_start_resumes_from_another_folder(tmp_path, monkeypatch):
    """(run.json kept "src" as typed: a resume from elsewhere said "warm-start run 'src' does not exist".)"""
    made = tmp_path / "made"
    made.mkdir()
    monkeypatch.chdir(made)
    kw = ["--space", "nb201", "--executor", "simulated", "--quiet"]
    assert main(["search", *kw, "--budget", "10", "--run-dir", "src"]) == 0
    assert main(["search", *kw, "--budget", "10", "--warm-start", "src", "--run-dir", "dst"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--resume", str(made / "dst"), "--budget", "14"]) == 0
    assert len(nas.load_results(made / "dst")) == 14


@pytest.mark.parametrize("spellings", [("max-params", "max_params"), ("max_params", "max-params")])
def test_a_config_file_giving_one_option_in_two_spellings_is_refused(tmp_path, capsys, spellings):
    """(The last one silently won; the same key spelt the same way twice was already refused.)"""
    config = tmp_path / "c.yaml"
    config.write_text(f"space: toy\n{spellings[0]}: 10\n{spellings[1]}: 20\n")
    assert main(["search", "--config", str(config)]) == 2
    assert (f"config file {str(config)!r} gives option 'max_params' twice, as {spellings[0]!r} and "
            f"{spellings[1]!r}") in capsys.readouterr().err


def test_config_files_and_values_a_careless_user_gives(tmp_path, capsys):
    """(An empty file ran the whole default search; a TOML file with a byte-order mark was "Invalid statement (at line
    1, column 1)"; `--data-budget-mb inf` wrote Infinity, which is not JSON, into run.json; 'val_acc:' was max.)"""
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert main(["search", "--config", str(empty)]) == 2
    assert "holds no options; give at least one" in capsys.readouterr().err
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + b'space = "toy"\nexecutor = "inprocess"\nepochs = 1\nbudget = 2\n')
    assert main(["search", "--config", str(bom), "--quiet", "--run-dir", str(tmp_path / "run")]) == 0
    with pytest.raises(ValueError, match="data_budget_mb must be None .automatic. or a finite number >= 0, got inf"):
        nas.TrainSettings(data_budget_mb=float("inf"))
    from nas.core.objectives import Objective

    with pytest.raises(ValueError, match="objective 'val_acc:' names no mode after its ':'; give max or min"):
        Objective.parse("val_acc:")


def test_the_summary_says_a_resumed_sessions_share_and_quotes_its_commands(tmp_path, capsys):
    """(After a resume: "finished 64 trials in 1 s", the time this session's and the trials the run's; a folder with
    a space printed `nas results re with space`, which cannot be pasted back.)"""
    run = tmp_path / "with space"
    kw = ["--space", "toy", "--executor", "inprocess", "--epochs", "1", "--quiet"]
    assert main(["search", *kw, "--budget", "2", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["search", "--resume", str(run), "--budget", "3"]) == 0
    out = capsys.readouterr().out
    assert "finished 3 trials (1 of them in this session, 0 failed)" in out
    assert f"nas results '{run}'" in out


def test_a_report_of_a_run_whose_every_trial_failed_says_so(tmp_path):
    """(Its decisions panel said "architectures not parsed": they parse; no trial completed.)"""
    run = tmp_path / "run"
    nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=None, seed=0, run_dir=run, progress=False,
               train=scored(lambda a: float("nan")))
    page = write_report(run, tmp_path / "page.html").read_text()
    assert "architectures not parsed" not in page and "no trial completed" in page


def test_the_results_table_of_a_warm_started_run_says_which_trials_are_the_warm_starts(tmp_path, capsys):
    """(It listed the earlier run's trials, negative ids, unmarked, one of them on top; nas best and nas status count
    the run's own only.)"""
    kw = ["--space", "nb201", "--executor", "simulated", "--quiet"]
    assert main(["search", *kw, "--budget", "4", "--run-dir", str(tmp_path / "src")]) == 0
    assert main(["search", *kw, "--budget", "2", "--warm-start", str(tmp_path / "src"), "--run-dir",
                 str(tmp_path / "dst")]) == 0
    capsys.readouterr()
    assert main(["results", str(tmp_path / "dst")]) == 0
    assert ("6 trials (2 of this run, 4 of its warm start: ids below 0, which nas best and nas status leave out)"
            in capsys.readouterr().out)


def test_a_run_its_time_budget_ended_before_any_trial_says_so(tmp_path, capsys):
    """(`nas results` said "no finished trials yet" of a finished run; `nas status` "the run is not running", never
    that its time budget had ended it.)"""
    run = tmp_path / "run"
    assert main(["search", "--space", "nb201", "--executor", "simulated", "--budget", "5", "--time-budget", "1",
                 "--quiet", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["results", str(run)]) == 0
    assert capsys.readouterr().out.strip() == f"no finished trials (the run is not running: nas status {run} says " \
                                             "how it ended)"
    assert main(["status", str(run)]) == 0
    assert "ETA       - (5 trials left; its time budget ended it)" in capsys.readouterr().out

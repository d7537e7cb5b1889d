"""The ``nas`` command line, called in-process (the in-process executor keeps these fast)."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
import torch

import nas
from nas.cli import main
from tests.helpers import FAST, TINY_SPACE


def test_search_then_results_and_best(tmp_path, nas_cli):
    run_dir = str(tmp_path / "run")
    code, out, _ = nas_cli("search", *FAST, "--budget", "4", "--run-dir", run_dir,
                           "-o", "population=2", "-o", "sample_size=1")
    assert code == 0
    assert "finished 4 trials (0 failed)" in out and "best val_acc" in out and run_dir in out

    code, out, _ = nas_cli("results", run_dir)
    assert code == 0 and "4 trials: 4 complete, 0 failed" in out

    csv, parquet = tmp_path / "t.csv", tmp_path / "t.parquet"
    assert nas_cli("results", run_dir, "--csv", str(csv), "--parquet", str(parquet))[0] == 0
    assert len(pd.read_csv(csv)) == 4 and len(pd.read_parquet(parquet)) == 4

    arch_json, weights = tmp_path / "best.json", tmp_path / "best.pt"
    code, out, _ = nas_cli("best", run_dir, "--export-json", str(arch_json),
                           "--export-weights", str(weights))
    assert code == 0 and "best trial" in out
    exported = json.loads(arch_json.read_text())
    assert set(exported["arch"]) == {f"d{i}" for i in range(5)}
    assert torch.load(weights, weights_only=False)["arch"] == exported["arch"]


def test_config_file_with_command_line_override(tmp_path, nas_cli):
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent("""
        space = "toy"
        strategy = "random"
        budget = 3
        executor = "inprocess"
        epochs = 1
    """))
    code, out, _ = nas_cli("search", "--config", str(cfg), "--budget", "2", "--quiet",
                           "--run-dir", str(tmp_path / "r"))
    assert code == 0 and "finished 2 trials" in out
    ycfg = tmp_path / "run.yaml"
    ycfg.write_text("space: toy\nstrategy: random\nbudget: 2\nexecutor: inprocess\nepochs: 1\n")
    assert nas_cli("search", "--config", str(ycfg), "--quiet", "--run-dir", str(tmp_path / "y"))[0] == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["--strategy", "genetic"], "unknown strategy 'genetic'; known: evolution, "),
    (["--space", "nope"], "unknown search space 'nope'; known: "),
    (["--budget", "0"], "--budget must be an integer >= 1, got 0"),  # (the flag typed, not "config key 'budget'")
    (["--lr", "-1"], "--lr must be a finite number > 0, got -1.0"),
    # (the simulated executor answered --epochs 1 at its table's 12, --dataset synthetic from CIFAR-10's table)
    (["--executor", "simulated", "--space", "nb201", "--epochs", "1"], "the simulated executor's table nb201-cifar10 "
     "answers at 12 or 200 epochs, got epochs 1: give one of them, or leave it out (the table's 12)"),
    (["--executor", "simulated", "--space", "nb201", "--dataset", "synthetic"], "not from a dataset (got dataset "
     "'synthetic'): leave it out, or choose the table with the executor option benchmark, one of nb201-cifar10, "),
    (["--space", "no_such_module:Space"], "cannot import module 'no_such_module'"),
    (["--space", "nas.core.space:Nothing"], "module 'nas.core.space' has no attribute 'Nothing'"),
    (["-o", "population"], "is not KEY=VALUE"),
    (["-o", "populaton=3"], "unknown options ['populaton'] for strategy 'evolution'"),
    (["--dataset", "cifar"], "unknown dataset 'cifar'"),
    (["--executor", "spark"], "unknown executor 'spark'"),
])
def test_bad_options_give_one_line_and_exit_2(tmp_path, nas_cli, argv, message):
    code, _, err = nas_cli("search", *FAST, "--run-dir", str(tmp_path / "r"), *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_malformed_and_unknown_config(tmp_path, nas_cli):
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = = 3\n")
    code, _, err = nas_cli("search", "--config", str(bad))
    assert code == 2 and "is malformed" in err
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("budgett = 3\n")
    code, _, err = nas_cli("search", "--config", str(unknown))
    assert code == 2 and "unknown config keys ['budgett']" in err
    code, _, err = nas_cli("search", "--config", str(tmp_path / "missing.toml"))
    assert code == 2 and "does not exist" in err
    code, _, err = nas_cli("search", "--config", "/dev/null")  # (it "did not exist")
    assert code == 2 and err.strip().endswith("config file '/dev/null' is not a regular file; name a .toml, .yaml or "
                                              ".yml file")


def test_results_of_a_non_run_directory(tmp_path, nas_cli):
    code, _, err = nas_cli("results", str(tmp_path))
    assert code == 2 and "is not a run directory" in err


def test_existing_run_directory_is_not_overwritten(tmp_path, nas_cli):
    args = ["search", *FAST, "--budget", "1", "--run-dir", str(tmp_path / "r")]
    assert nas_cli(*args)[0] == 0
    code, _, err = nas_cli(*args)
    assert code == 2 and "already holds a run" in err


def test_listings(nas_cli):
    code, out, _ = nas_cli("spaces")
    assert code == 0 and "nb201" in out and "15,625" in out and "macro" in out
    code, out, _ = nas_cli("strategies")
    assert code == 0 and "evolution" in out and "random" in out


def test_help_for_every_command(capsys):
    for command in ["search", "results", "best", "spaces", "strategies"]:
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        assert "usage: nas " + command in capsys.readouterr().out


def test_custom_space_by_module_path(tmp_path, nas_cli, monkeypatch):
    (tmp_path / "myspace.py").write_text(TINY_SPACE)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = nas_cli("search", "--space", "myspace:Tiny", "--executor", "inprocess", "--quiet",
                           "--epochs", "1", "--budget", "3", "--strategy", "random", "--run-dir", str(tmp_path / "r"))
    assert code == 0 and "finished 3 trials" in out
    code, out, _ = nas_cli("results", str(tmp_path / "r"), "--view", "arch")  # (the table fits 80 columns)
    assert '"hidden": ' in out  # a custom space: results never import it, so canonical JSON


# -- the space and the training function rebuilt from run.json ------------------------------------------------------
def test_a_parameterised_space_is_rebuilt_with_its_arguments_for_the_test_split(tmp_path, nas_cli):
    """The regression of NB201Space(channels=4): `nas best --evaluate-test` rebuilt the space from its name only
    (16 channels) and ended in a size-mismatch traceback."""
    import numpy as np

    from nas.search_spaces.nb201 import NB201Space
    from nas.train.synthetic import synthetic_images

    x, y = synthetic_images(48, classes=3, size=8, seed=0)
    np.savez(tmp_path / "imgs.npz", x=x, y=y, x_test=x[:10], y_test=y[:10])
    settings = nas.TrainSettings(epochs=1, batch_size=16, device="cpu", measure_costs=False)
    nas.search(NB201Space(channels=4), "random", budget=2, executor="inprocess", data=str(tmp_path / "imgs.npz"),
               settings=settings, run_dir=tmp_path / "api")
    code, out, err = nas_cli("best", str(tmp_path / "api"), "--evaluate-test")
    assert code == 0 and "on 10 test images" in out, err
    code, out, err = nas_cli("search", "--space", "nb201", "--space-option", "channels=4", "--strategy", "random",
                             "--executor", "inprocess", "--budget", "1", "--epochs", "1", "--batch-size", "16",
                             "--no-measure-costs", "--dataset", str(tmp_path / "imgs.npz"), "--quiet",
                             "--run-dir", str(tmp_path / "cli"))
    assert code == 0, err
    assert json.loads((tmp_path / "cli" / "run.json").read_text())["search"]["space_args"] == {"channels": 4}
    assert nas_cli("best", str(tmp_path / "cli"), "--evaluate-test")[0] == 0


def test_an_importable_training_function_is_recorded_and_resumed_from_the_command_line(tmp_path, nas_cli,
                                                                                       monkeypatch):
    (tmp_path / "mytrain.py").write_text(textwrap.dedent("""
        def train(ctx):  # a custom scale, far from digits accuracy: a silent switch to the built-in trainer shows
            ctx.report(epoch=1, val_acc=10.0 + sum(ctx.trial.arch.values()))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import mytrain

    from nas.search_spaces.toy import ToySpace

    nas.search(ToySpace(), "random", budget=3, executor="inprocess", data=None, train=mytrain.train,
               run_dir=tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "run.json").read_text())["train"]
    assert (saved["function"], saved["dataset"], saved["dataset_fingerprint"]) == ("mytrain:train", None, None)
    code, _, err = nas_cli("search", "--resume", str(tmp_path / "run"), "--budget", "5", "--quiet")
    assert code == 0, err
    df = nas.load_results(tmp_path / "run")
    assert sorted(df.trial_id) == list(range(5)) and (df.score >= 10).all()


def test_executor_objects_are_recorded_by_their_registered_name(tmp_path, nas_cli):
    from nas.engine.simulated import SimulatedExecutor
    from nas.engine.tabular.nb201_table import NB201Benchmark
    from nas.search_spaces.nb201 import NB201Space

    ex = SimulatedExecutor(NB201Space(), NB201Benchmark("cifar10"), workers=2, seed=0)
    nas.search(NB201Space(), "random", budget=3, executor=ex, data=None, run_dir=tmp_path / "object")
    saved = json.loads((tmp_path / "object" / "run.json").read_text())
    assert saved["execution"]["executor"] == "simulated"
    assert saved["execution"]["executor_class"] == "nas.engine.simulated:SimulatedExecutor"
    code, _, err = nas_cli("search", "--resume", str(tmp_path / "object"), "--budget", "4")
    assert code == 2 and "resume it from Python with the same one" in err and "executor" in err

    nas.search("nb201", "random", budget=3, executor="simulated", data=None, run_dir=tmp_path / "name")
    code, _, err = nas_cli("search", "--resume", str(tmp_path / "name"), "--budget", "5", "--quiet")
    assert code == 0, err  # the simulated executor again, by its name: no Ray
    assert len(nas.load_results(tmp_path / "name")) == 5

    code, _, err = nas_cli("search", "--space", "nb201", "--executor", "simulated", "--dataset", "none",
                           "--strategy", "random", "--budget", "1000", "--time-budget", "2000", "--quiet",
                           "--run-dir", str(tmp_path / "timed"))
    assert code == 0, err
    assert 10 < len(nas.load_results(tmp_path / "timed")) < 1000  # ended by 2,000 simulated seconds, not the budget


def test_python_m_nas_and_nas_cli_and_a_light_version(tmp_path):
    import subprocess
    import sys

    for module in ("nas", "nas.cli"):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--version"], capture_output=True,
                              text=True, check=True, cwd=tmp_path)
        assert proc.stdout.startswith("nas-ray ")
        imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
        assert not {"torch", "ray", "pandas"} & imported, sorted(imported & {"torch", "ray", "pandas"})


@pytest.mark.parametrize(("argv", "said"), [
    (["search", "--budjet", "3"], "nas search: error: unrecognized arguments: --budjet 3 (did you mean '--budget'?)"),
    (["search", "toy"], "nas search: error: unrecognized arguments: toy"),
    (["results", "RUN", "--frmat=csv", "--tpo", "3"], "nas results: error: unrecognized arguments: --frmat=csv "
                                                      "--tpo 3 (did you mean '--format' for '--frmat', '--top' for "
                                                      "'--tpo'?)"),
    (["results", "RUN", "--json"], "nas results: error: unrecognized arguments: --json"),  # (not '--sort')
    (["bench", "scaling", "--jbos", "2"], "nas bench scaling: error: unrecognized arguments: --jbos 2 (did you mean "
                                          "'--jobs'?)"),
    # (argparse took a unique prefix for a flag: --max-param was --max-params, --exp of `nas best` --export)
    (["search", "--max-param", "5"], "nas search: error: unrecognized arguments: --max-param 5 (did you mean "
                                     "'--max-params'?)"),
    (["best", "RUN", "--exp", "x"], "nas best: error: unrecognized arguments: --exp x (did you mean '--export'?)"),
    (["supernet", "train", "--epoks", "2"], "nas supernet train: error: unrecognized arguments: --epoks 2 (did you "
                                            "mean '--epochs'?)"),
])
def test_an_unknown_argument_is_said_by_the_command_given(nas_cli, argv, said):
    """(said by the top parser, under `usage: nas [-h] [--version] COMMAND ...`, with no flag suggested)"""
    code, out, err = nas_cli(*argv)
    assert code == 2 and err.strip().splitlines()[-1] == said, err
    assert f"usage: nas {' '.join(a for a in argv[:2] if not a.startswith('-') and a not in ('RUN', 'toy'))}" in err


def test_a_resume_raises_the_time_budget_and_refuses_to_lower_it(tmp_path, nas_cli):
    """(The docs say a raised time budget takes over at the journal's end, and the API took one, but the CLI refused
    the flag on a resume.)"""
    run = str(tmp_path / "run")
    common = ["--space", "nb201", "--executor", "simulated", "--budget", "100000", "--quiet"]
    assert nas_cli("search", *common, "--time-budget", "20000", "--run-dir", run)[0] == 0
    first = len(nas.load_results(run))
    code, out, err = nas_cli("search", "--resume", run, "--time-budget", "40000", "--quiet")
    assert code == 0, err
    assert len(nas.load_results(run)) > first
    assert json.loads((tmp_path / "run" / "run.json").read_text())["search"]["time_budget"] == 40000
    code, _, err = nas_cli("search", "--resume", run, "--time-budget", "30000")
    assert code == 2 and err.strip().endswith(f"--time-budget may only be raised when resuming: {run!r} has "
                                              "time_budget 40000, got 30000"), err
    assert nas_cli("search", *common, "--budget", "3", "--run-dir", str(tmp_path / "b"))[0] == 0
    code, _, err = nas_cli("search", "--resume", str(tmp_path / "b"), "--time-budget", "30000")
    assert code == 2 and "has none (no limit), got 30000" in err


def test_a_resume_of_a_run_its_time_budget_ended_says_why_nothing_runs(tmp_path, nas_cli, caplog):
    run = str(tmp_path / "run")
    common = ["--space", "nb201", "--executor", "simulated", "--budget", "100000", "--quiet"]
    assert nas_cli("search", *common, "--time-budget", "5000", "--run-dir", run)[0] == 0
    first = len(nas.load_results(run))
    with caplog.at_level("WARNING", logger="nas.engine.loop"):
        assert nas_cli("search", "--resume", run, "--budget", "200000", "--quiet")[0] == 0
    assert len(nas.load_results(run)) == first
    assert any("the run's time budget (5000 s) is spent: nothing more finishes unless a resume raises" in r.message
               for r in caplog.records)

"""The ``nas`` command line, called in-process (the in-process executor keeps these fast)."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
import torch

from nas.cli import main

FAST = ["--space", "toy", "--executor", "inprocess", "--epochs", "1", "--quiet"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_search_then_results_and_best(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    code, out, _ = run(capsys, "search", *FAST, "--budget", "4", "--run-dir", run_dir,
                       "-o", "population=2", "-o", "sample_size=1")
    assert code == 0
    assert "finished 4 trials (0 failed)" in out and "best score" in out and run_dir in out

    code, out, _ = run(capsys, "results", run_dir)
    assert code == 0 and "4 trials: 4 complete, 0 failed" in out

    csv, parquet = tmp_path / "t.csv", tmp_path / "t.parquet"
    assert run(capsys, "results", run_dir, "--csv", str(csv), "--parquet", str(parquet))[0] == 0
    assert len(pd.read_csv(csv)) == 4 and len(pd.read_parquet(parquet)) == 4

    arch_json, weights = tmp_path / "best.json", tmp_path / "best.pt"
    code, out, _ = run(capsys, "best", run_dir, "--export-json", str(arch_json),
                       "--export-weights", str(weights))
    assert code == 0 and "best trial" in out
    exported = json.loads(arch_json.read_text())
    assert set(exported["arch"]) == {f"d{i}" for i in range(5)}
    assert torch.load(weights, weights_only=False)["arch"] == exported["arch"]


def test_config_file_with_command_line_override(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent("""
        space = "toy"
        strategy = "random"
        budget = 3
        executor = "inprocess"
        epochs = 1
    """))
    code, out, _ = run(capsys, "search", "--config", str(cfg), "--budget", "2", "--quiet",
                       "--run-dir", str(tmp_path / "r"))
    assert code == 0 and "finished 2 trials" in out
    ycfg = tmp_path / "run.yaml"
    ycfg.write_text("space: toy\nstrategy: random\nbudget: 2\nexecutor: inprocess\nepochs: 1\n")
    assert run(capsys, "search", "--config", str(ycfg), "--quiet", "--run-dir", str(tmp_path / "y"))[0] == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["--strategy", "genetic"], "unknown strategy 'genetic'; known: evolution, "),
    (["--space", "nope"], "unknown search space 'nope'; known: "),
    (["--budget", "0"], "config key 'budget' must be an integer >= 1, got 0"),
    (["--space", "no_such_module:Space"], "cannot import module 'no_such_module'"),
    (["--space", "nas.core.space:Nothing"], "module 'nas.core.space' has no attribute 'Nothing'"),
    (["-o", "population"], "is not KEY=VALUE"),
    (["-o", "populaton=3"], "unknown options ['populaton'] for strategy 'evolution'"),
    (["--dataset", "cifar"], "unknown dataset 'cifar'"),
    (["--executor", "spark"], "unknown executor 'spark'"),
])
def test_bad_options_give_one_line_and_exit_2(tmp_path, capsys, argv, message):
    code, _, err = run(capsys, "search", *FAST, "--run-dir", str(tmp_path / "r"), *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_malformed_and_unknown_config(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = = 3\n")
    code, _, err = run(capsys, "search", "--config", str(bad))
    assert code == 2 and "is malformed" in err
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("budgett = 3\n")
    code, _, err = run(capsys, "search", "--config", str(unknown))
    assert code == 2 and "unknown config keys ['budgett']" in err
    code, _, err = run(capsys, "search", "--config", str(tmp_path / "missing.toml"))
    assert code == 2 and "does not exist" in err


def test_results_of_a_non_run_directory(tmp_path, capsys):
    code, _, err = run(capsys, "results", str(tmp_path))
    assert code == 2 and "is not a run directory" in err


def test_existing_run_directory_is_not_overwritten(tmp_path, capsys):
    args = ["search", *FAST, "--budget", "1", "--run-dir", str(tmp_path / "r")]
    assert run(capsys, *args)[0] == 0
    code, _, err = run(capsys, *args)
    assert code == 2 and "already holds a run" in err


def test_listings(capsys):
    code, out, _ = run(capsys, "spaces")
    assert code == 0 and "nb201" in out and "15,625" in out and "macro" in out
    code, out, _ = run(capsys, "strategies")
    assert code == 0 and "evolution" in out and "random" in out


def test_help_for_every_command(capsys):
    for command in ["search", "results", "best", "spaces", "strategies"]:
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        assert "usage: nas " + command in capsys.readouterr().out


def test_custom_space_by_module_path(tmp_path, capsys, monkeypatch):
    (tmp_path / "myspace.py").write_text(textwrap.dedent("""
        import torch
        import nas

        class Tiny(nas.SearchSpace):
            def dims(self):
                return {"hidden": [8, 16], "act": ["relu", "tanh"]}

            def build(self, arch, task):
                act = torch.nn.ReLU() if arch["act"] == "relu" else torch.nn.Tanh()
                return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, arch["hidden"]), act,
                                           torch.nn.Linear(arch["hidden"], task.num_classes))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = run(capsys, "search", "--space", "myspace:Tiny", "--executor", "inprocess", "--quiet",
                       "--epochs", "1", "--budget", "3", "--strategy", "random", "--run-dir", str(tmp_path / "r"))
    assert code == 0 and "finished 3 trials" in out
    code, out, _ = run(capsys, "results", str(tmp_path / "r"))
    assert '"hidden": ' in out  # a custom space: results never import it, so canonical JSON

"""Run directories someone else made: opening one with any `nas` command runs none of their code.

Crafted from a real (tiny, in-process) run: a run.json whose space names a callable (`os:system`, `sys:exit`,
`builtins:eval`, `code:interact`) or a module that writes a marker when imported; a strategy state, an Optuna
study inside it and PBT checkpoints that write a marker when unpickled. Each command must refuse with one line
(exit 2) or not read the file at all (exit 0), and no marker may appear. The contract is what is observable
(exit status, one line on stderr, no marker), so it holds across the file formats that replace strategy.pkl.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nas
from nas.run.store import SNAPSHOT
from nas.search_spaces.toy import toy_score
from nas.train.settings import TrainSettings
from nas.train.simple import scored

READ_ONLY = [["results"], ["best"], ["status"], ["report"]]
CALLABLES = ["os:system", "sys:exit", "builtins:eval", "code:interact"]


class Touch:
    """Unpickling it touches ``marker``: what a malicious pickle in a run directory would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


def nas_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "nas.cli", *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)


def refused_or_ignored(proc: subprocess.CompletedProcess) -> None:
    """Exit 2 with one line on stderr, or exit 0 (the file was not read); never a crash, a console or an exit 1."""
    assert proc.returncode in (0, 2), (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    else:  # did its job (a `sys:exit` that was called would end it at once with no output)
        assert proc.stdout.strip(), proc.stderr[-2000:]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A real finished run (random search on the toy space, in-process, scores without training)."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    nas.search("toy", "random", budget=3, executor="inprocess", seed=0, run_dir=run_dir,
               data=None, train=scored(toy_score))
    return run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    return run_dir


def set_space(run_dir: Path, spec: str) -> None:
    cfg = json.loads((run_dir / "run.json").read_text())
    cfg["search"]["space"] = spec
    (run_dir / "run.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c[0])
def test_read_only_commands_import_no_module_named_by_run_json(run_copy, tmp_path, command):
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nclass Evil: pass\n")
    set_space(run_copy, "evilmod:Evil")
    refused_or_ignored(nas_cli(*command, str(run_copy), cwd=tmp_path))
    assert not marker.exists()


@pytest.mark.parametrize("spec", CALLABLES)
@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c[0])
def test_read_only_commands_call_nothing_named_by_run_json(run_copy, tmp_path, command, spec):
    set_space(run_copy, spec)
    proc = nas_cli(*command, str(run_copy), cwd=tmp_path)
    refused_or_ignored(proc)
    assert ">>>" not in proc.stdout + proc.stderr and "InteractiveConsole" not in proc.stderr  # no console opened


@pytest.mark.parametrize("spec", CALLABLES)
def test_resume_refuses_a_space_that_is_no_searchspace_class(run_copy, tmp_path, spec):
    set_space(run_copy, spec)
    proc = nas_cli("search", "--resume", str(run_copy), "--budget", "4", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert spec in proc.stderr and "SearchSpace" in proc.stderr
    saved = json.loads((run_copy / "run.json").read_text())
    assert saved["search"]["budget"] == 3  # refused before anything was written


@pytest.mark.parametrize("key", ["space", "function"])
@pytest.mark.parametrize("argv", [["search", "--resume", "{run}", "--budget", "4"],
                                  ["retrain", "{run}", "--executor", "inprocess", "--out", "{out}"]],
                         ids=["resume", "retrain"])
def test_a_standard_library_module_named_by_run_json_is_refused_before_its_import(run_copy, tmp_path, key, argv):
    """`this:s` printed The Zen of Python before the refusal: importing a module runs it, and the standard library's
    (`this`, `antigravity`) are refused as spaces or training functions only once imported."""
    cfg = json.loads((run_copy / "run.json").read_text())
    cfg["search" if key == "space" else "train"][key] = "this:s"
    cfg["train"]["dataset"] = "digits"  # (retrain's data is checked before its training function)
    (run_copy / "run.json").write_text(json.dumps(cfg))
    proc = nas_cli(*[a.format(run=run_copy, out=tmp_path / "out") for a in argv], cwd=tmp_path)
    assert proc.returncode == 2 and "names a module of Python's standard library, which is not imported" in proc.stderr
    assert "Zen" not in proc.stdout + proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["best", "{run}", "--draw", "{out}.html"],
                                  ["retrain", "{run}", "--executor", "inprocess", "--epochs", "1", "--out", "{out}"],
                                  ["search", "--resume", "{run}", "--budget", "4"]], ids=["draw", "retrain", "resume"])
def test_a_space_module_planted_in_the_run_directory_is_never_imported(run_copy, tmp_path, argv):
    """With the run directory on PYTHONPATH (or the current folder), a resume refused the planted module, but
    `nas best --draw` and `nas retrain` imported it: its code ran."""
    marker = tmp_path / "imported"
    (run_copy / "planted.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                         "from nas.search_spaces.toy import ToySpace as Space\n")
    set_space(run_copy, "planted:Space")
    cfg = json.loads((run_copy / "run.json").read_text())
    cfg["train"]["dataset"] = "digits"  # (retrain's data is checked before its space)
    (run_copy / "run.json").write_text(json.dumps(cfg))
    proc = nas_cli(*[a.format(run=run_copy, out=tmp_path / "out") for a in argv], cwd=run_copy)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("name", [SNAPSHOT, "strategy.pkl"])
def test_resume_unpickles_no_strategy_state(run_copy, tmp_path, name):
    marker = tmp_path / "unpickled"
    (run_copy / name).write_bytes(pickle.dumps(Touch(marker)))
    proc = nas_cli("search", "--resume", str(run_copy), "--budget", "4", cwd=tmp_path)
    refused_or_ignored(proc)
    assert not marker.exists()
    for command in READ_ONLY:  # the read-only commands do not read it at all
        assert nas_cli(*command, str(run_copy), cwd=tmp_path).returncode == 0
        assert not marker.exists()


def test_resume_unpickles_no_optuna_study(tmp_path):
    """The study lives in Optuna's own journal storage (JSON lines); a pickle put in its place is not run."""
    run_dir, marker = tmp_path / "run", tmp_path / "unpickled-study"
    nas.search("toy", "optuna", budget=3, executor="inprocess", seed=0, run_dir=run_dir,
               data=None, train=scored(toy_score))
    assert (run_dir / "optuna.journal").is_file()
    (run_dir / "optuna.journal").write_bytes(pickle.dumps(Touch(marker)))
    proc = nas_cli("search", "--resume", str(run_dir), "--budget", "4", cwd=tmp_path)
    assert not marker.exists()
    refused_or_ignored(proc)


def test_resume_unpickles_no_checkpoint(tmp_path):
    import torch

    run_dir, marker = tmp_path / "run", tmp_path / "unpickled-checkpoint"
    nas.search("toy", "pbt", budget=4, executor="inprocess", seed=0, run_dir=run_dir,
               settings=TrainSettings(epochs=1, seed=0), strategy_options={"population": 2, "quantile": 0.5})
    checkpoints = sorted((run_dir / "checkpoints").glob("*.pt"))
    assert checkpoints
    for path in checkpoints:
        torch.save(Touch(marker), path)
    proc = nas_cli("search", "--resume", str(run_dir), "--budget", "8", cwd=tmp_path)
    assert not marker.exists()
    refused_or_ignored(proc)


def test_resume_keeps_no_crafted_best_weights(tmp_path):
    """best.pt replaced by a pickle that runs code, best.json's hash updated to match: the resume refuses it with one
    line before writing anything, and nothing is unpickled."""
    import hashlib

    import torch

    run_dir, marker = tmp_path / "run", tmp_path / "unpickled-best"
    nas.search("toy", "random", budget=2, executor="inprocess", seed=0, run_dir=run_dir,
               settings=TrainSettings(epochs=1, seed=0))
    torch.save(Touch(marker), run_dir / "best.pt")
    best = json.loads((run_dir / "best.json").read_text())
    digest = hashlib.sha256((run_dir / "best.pt").read_bytes()).hexdigest()
    (run_dir / "best.json").write_text(json.dumps({**best, "weights_sha256": digest}))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"best.pt is not a plain checkpoint"):
        nas.search("toy", "random", budget=3, executor="inprocess", seed=0, run_dir=run_dir,
                   settings=TrainSettings(epochs=1, seed=0), resume=True)
    assert not marker.exists()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before

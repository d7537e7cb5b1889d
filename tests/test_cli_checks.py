"""`nas search` checks what you type before anything is made or Ray starts (#21 class 9, #24 item 2), says first
what it starts, imports a typed ``module:Class`` from the current directory, and never imports a resumed run's
code from inside the run directory (#21 class 12).

The bad inputs run in one fresh process (``nas.cli.main`` called once per input), so that "Ray did not start" is
a fact about that process: ``ray.is_initialized()`` after each refusal, and no run directory made.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from nas.cli import build_parser
from nas.run.lock import RunLock
from tests.helpers import TINY_SPACE

MAIN_EACH = textwrap.dedent("""
    import json, sys
    from nas.cli import main
    for args in json.loads(sys.argv[1]):
        code = main(["search", *args])
        ray = sys.modules.get("ray")
        print("RESULT " + json.dumps([code, bool(ray is not None and ray.is_initialized())]), flush=True)
""")


def nas_process(cwd: Path, *args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "nas.cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


BAD = [
    (["--strategy", "evoluton"], "unknown strategy 'evoluton' (did you mean 'evolution'?)"),
    (["-o", "populaton=3"], "unknown options ['populaton'] for strategy 'evolution' (did you mean 'population'?)"),
    (["--space", "toyy"], "unknown search space 'toyy' (did you mean 'toy'?)"),
    (["--space", "nas.core.space:SearchSpace"], "declares no decisions"),
    (["--space", "nosuchmodule:Tiny"], "cannot import module 'nosuchmodule' for space 'nosuchmodule:Tiny': No module "
                                       "named 'nosuchmodule'; run nas from the folder that holds nosuchmodule, or put"),
    (["--space", "os:system"], "names a module of Python's standard library, which is not imported"),
    (["--space", "this:s"], "names a module of Python's standard library"),  # (its import prints the Zen)
    (["--space", "nas.__main__:X"], "names a program's entry point (__main__), which is not imported"),
    # (accepted, and the run never exploited: independent training with random hparams, still called PBT)
    (["--strategy", "pbt", "-o", "population=4", "-o", "quantile=0.2"], "population x quantile must be >= 1 (the "
     "bottom quantile must hold a member, or none ever exploits), got population=4, quantile=0.2 (0.8)"),
    (["--scheduler", "ashaa"], "unknown scheduler 'ashaa' (did you mean 'asha'?)"),
    # (a misspelt space option was Python's "got an unexpected keyword argument"; the others named no near one)
    (["--space", "nb201", "--space-option", "chanels=8"], "unknown options ['chanels'] for space 'nb201' (did you "
                                                         "mean 'channels'?); allowed: channels, cells_per_stage"),
    # (each segment restarted the schedule: the learning rate back up after each anneal)
    (["--strategy", "pbt", "--schedule", "cosine"], "pbt trains each member segment after segment past the run's "
     "epochs, and the built-in trainer's cosine schedule would start again at each segment"),
    (["--strategy", "pbt", "-o", 'hparams={"schedule": ["constant", "cosine"]}'], "pbt's hparams search the "
     "schedule (['constant', 'cosine']), and a member that draws cosine would start it again at each segment"),
    # (a promotion continued a child past its child_epochs, its schedule spent: the learning rate jumped back up)
    (["-o", "inherit=true", "-o", "child_epochs=1", "--scheduler", "asha", "--scheduler-option", "variant=promotion"],
     "child_epochs=1 (the epochs an inheriting child trains) and asha's promotions (which continue a trial past "
     "them) do not go together"),
    (["--optimizer", "sgdd"], "unknown optimizer 'sgdd' (did you mean 'sgd'?); known: adam, adamw, sgd"),
    (["--recipe", "nb21"], "unknown recipe 'nb21' (did you mean 'nb201'?); known: nb201, nb201-12"),
    (["--scheduler", "asha", "--scheduler-option", "etaa=2"], "(did you mean 'eta'?)"),
    (["--dataset", "digitz"], "unknown dataset 'digitz' (did you mean 'digits'?)"),
    (["--dataset", "cifar10:no/such/dir"], "cifar10 directory 'no/such/dir' does not exist; nothing is downloaded: "
                                           "get cifar-10-python.tar.gz from https://www.cs.toronto.edu"),  # (the docs'
    # promise: where to get it and where to put it; it said only "the folder ... does not exist")
    (["--objective", "val_acc:maxx"], "must be max or min, got 'maxx'"),
    (["--seed", "1" + "0" * 40], "--seed must be below 2**63 in size"),
    (["--time-budget", "inf"], "--time-budget must be a finite number of seconds > 0 (or none)"),
    (["--executor-option", "prefetc=1"], "unknown options ['prefetc'] for executor 'ray' (did you mean 'prefetch'?)"),
    (["--dataset", "none"], "the built-in trainer needs data: --dataset none is for a training function of your own"),
    (["--dataset", "none", "--train-function", "nas.train.fit:fit"], "the built-in trainer needs data: --dataset none"),
    (["--objective", "val_ac"], "objective 'val_ac' (did you mean 'val_acc'?) is not a metric the built-in trainer"),
    (["--objective", "val_acc", "--objective", "energy:min"], "objective 'energy' is not a metric the built-in"),
    # (listed among the metrics the trainer reports, but measured on CUDA only: every trial failed OBJECTIVE_MISSING)
    (["--objective", "val_acc", "--objective", "peak_memory_mb:min"], "objective 'peak_memory_mb' is measured on a "
     "GPU only, and every trial here trains on a CPU (no GPU is asked per trial, --gpus-per-trial): leave it out"),
    (["--objective", "peak_memory_mb:min", "--device", "cpu"], "every trial here trains on a CPU (the device is cpu)"),
    (["--run-dir", "locked"], "is in use by another search"),
    (["--run-dir", "notes"], "is not empty"),
    (["--scheduler-option", "eta=2"], "scheduler options ['eta'] given with no scheduler (none); give the scheduler"),
    (["--supernet-option", "bn_batches=4"], "supernet options ['bn_batches'] given with no supernet; they are for"),
    (["--executor-option", "prefetch=maybe"], "prefetch must be 'auto', True/1 or False/0, got 'maybe'"),
    # (a string reached Ray's start as "nan" * 4: "invalid literal for int() ... 'nannannan...'", after 17 s)
    (["--executor-option", "start_timeout=nan"], "executor option start_timeout must be a number of seconds > 0, got "
                                                 "'nan'"),
    (["--executor-option", "start_timeout=-1"], "executor option start_timeout must be a number of seconds > 0, got "
                                                "-1"),  # (accepted)
    (["--device", "cuda"], "device='cuda' needs a GPU per trial: pass gpus_per_trial > 0 (--gpus-per-trial)"),
    (["--strategy", "optuna", "-o", "storage=notes/notes.txt"], "storage='notes/notes.txt' is not an Optuna journal"),
    (["--strategy", "optuna", "-o", "storage=notes"], "strategy option storage='notes' is a folder"),
    (["--strategy", "optuna", "-o", "storage=nowhere/s.journal"], "its folder 'nowhere' does not exist"),
    (["--strategy", "optuna", "-o", "storage=new/s.journal", "--run-dir", "new"],
     "storage='new/s.journal' lies in the new run's directory 'new', where the run keeps its study itself"),
]


def test_every_bad_input_is_refused_in_one_line_before_anything_is_made_or_ray_starts(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    lock = RunLock(tmp_path / "locked").acquire()  # (held by this process: another search)
    lock.write_holder()
    try:
        argvs = [[*args, "--budget", "2", "--executor", "ray"] for args, _ in BAD]
        proc = nas_process(tmp_path, json.dumps(argvs), script=MAIN_EACH)
    finally:
        lock.release()
    results = [json.loads(line.removeprefix("RESULT ")) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nas search: error: ")]
    assert len(results) == len(BAD) == len(errors), proc.stderr[-3000:]
    for (args, message), (code, ray_started), error in zip(BAD, results, errors):
        assert code == 2 and not ray_started, (args, code)
        assert message in error, (args, error)
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked", "notes"]  # no run directory made
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes" / "notes.txt").read_text() == "mine"


BROKEN_SPACES = textwrap.dedent("""
    import nas

    class Empty(nas.SearchSpace):
        def dims(self):
            return {}

    class Listed(nas.SearchSpace):
        def dims(self):
            return [1, 2]

    class Unbuilt(nas.SearchSpace):
        def dims(self):
            return {"a": [1, 2]}

    abstract = nas.SearchSpace()
""")


def test_a_space_that_cannot_search_is_refused_before_anything_is_made_or_ray_starts(tmp_path):
    """Its dims() was first called at the first ask: after the run directory was made and Ray's workers started;
    an instance of the abstract base was a bare NotImplementedError, and a space without build() failed every
    trial of the budget."""
    (tmp_path / "broken.py").write_text(BROKEN_SPACES)
    expected = {"broken:Empty": "Empty.dims() declares no decisions",
                "broken:Listed": "Listed.dims() must return a dict of decision names to lists of options, got [1, 2]",
                "broken:Unbuilt": "space 'broken:Unbuilt' does not implement build(arch, task), which the built-in",
                "broken:abstract": "space 'broken:abstract' declares no decisions (dims() is not implemented)"}
    argvs = [["--space", space, "--budget", "2", "--executor", "ray"] for space in expected]
    proc = nas_process(tmp_path, json.dumps(argvs), script=MAIN_EACH)
    results = [json.loads(line.removeprefix("RESULT ")) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nas search: error: ")]
    assert results == [[2, False]] * len(expected) and len(errors) == len(expected), proc.stderr[-3000:]
    for message, error in zip(expected.values(), errors):
        assert message in error
    assert "Traceback" not in proc.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["broken.py"]


def test_a_space_without_build_searches_with_a_training_function_that_builds_its_own(tmp_path, monkeypatch):
    import nas

    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text(BROKEN_SPACES)
    monkeypatch.syspath_prepend(str(tmp_path))
    import broken

    with pytest.raises(ValueError, match="space Unbuilt does not implement build"):
        nas.search(broken.Unbuilt(), "random", budget=2, executor="inprocess")
    with pytest.raises(ValueError, match=r"space SearchSpace declares no decisions \(dims\(\) is not implemented\)"):
        nas.search(broken.abstract, "random", budget=2, executor="inprocess")
    assert list(tmp_path.iterdir()) == [tmp_path / "broken.py"]
    df = nas.search(broken.Unbuilt(), "random", budget=2, executor="inprocess", data=None,
                    train=lambda ctx: ctx.report(epoch=1, val_acc=ctx.trial.arch["a"] / 2))
    assert sorted(df.score) == [0.5, 1.0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where there is no CUDA device")
def test_ray_flags_with_an_executor_that_starts_no_ray_are_refused(tmp_path, capsys):
    """(Ignored, whatever they said: --address é searched and trained a supernet, exit 0.)"""
    from nas.cli import main

    for argv, said in (
            (["search", "--executor", "inprocess", "--address", "é"], "nas search: error: --address 'é' is for a Ray "
             "cluster; executor 'inprocess' starts none (drop it, or use --executor ray)"),
            (["search", "--executor", "simulated", "--space", "nb201", "--dashboard"], "nas search: error: --dashboard "
             "is for a Ray cluster; executor 'simulated' starts none (drop it, or use --executor ray)"),
            (["supernet", "train", "--executor", "inprocess", "--epochs", "1", "--address", "é"], "nas supernet: "
             "error: address 'é' is for a Ray cluster; executor 'inprocess' starts none (drop it, or use executor "
             "'ray')")):
        assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
        assert capsys.readouterr().err.strip() == said
    assert list(tmp_path.iterdir()) == []


def test_cuda_in_this_process_without_a_cuda_device_is_one_line(tmp_path, capsys):
    """It was a RuntimeError traceback from the first trial's data (after the run directory was made)."""
    from nas.cli import main

    for argv in (["search", "--executor", "inprocess", "--run-dir", str(tmp_path / "run")],
                 ["supernet", "train", "--executor", "inprocess", "--epochs", "1", "--run-dir", str(tmp_path / "sn")]):
        assert main([*argv, "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith("error: device='cuda' was asked for, but this machine has no CUDA device (torch "
                                "sees none); use device auto (CUDA where there is one) or cpu") and len(err) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_cluster_address_where_nothing_answers_is_refused_at_once(tmp_path, capsys):
    """Ray's own ``ray.init`` retries such an address for minutes; `nas search` and `nas supernet train` say it in
    one line before anything is made. The port is bound and not listening (so refused) for the test's length."""
    from nas.cli import main

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{held.getsockname()[1]}"
        for argv in (["search", "--space", "toy", "--budget", "2", "--run-dir", str(tmp_path / "run")],
                     ["supernet", "train", "--epochs", "1", "--run-dir", str(tmp_path / "sn")]):
            assert main([*argv, "--address", address]) == 2
            err = capsys.readouterr().err.strip()
            assert err.endswith(f"error: cannot reach the Ray cluster at {address!r}: Connection refused; start it "
                                "(ray start --head) or give its head's address (host:port, port 6379 by default)")
            assert len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def join_listening(cwd: Path, **env: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """`nas search --address` to a port that only accepts connections (no Ray there), with ``env`` for Ray's auth
    variables (the test's own taken out): the address and the process."""
    keep = {k: v for k, v in os.environ.items()
            if k not in ("RAY_ADDRESS", "PYTHONPATH", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        return address, subprocess.run(
            [sys.executable, "-m", "nas.cli", "search", "--space", "toy", "--budget", "2", "--dataset", "synthetic",
             "--run-dir", "run", "--quiet", "--address", address], cwd=cwd, env=keep | env, capture_output=True,
            text=True, timeout=300)


def test_a_token_file_that_cannot_be_read_is_one_line_naming_the_token(tmp_path):
    """RAY_AUTH_TOKEN_PATH naming no readable file was Ray's 40-line AuthenticationError traceback (exit 1). Ray
    reads the token before it connects, so a port that only accepts stands for the cluster."""
    from nas.engine.cluster import TOKEN_HINT

    missing = tmp_path / "no-token"
    address, proc = join_listening(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(missing))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"nas search: error: cannot join the Ray cluster at {address!r}: no token to give it (RAY_AUTH_TOKEN_PATH is "
        f"set but file cannot be opened or is empty: {missing}): {TOKEN_HINT}"), proc.stderr[-3000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("address", "said"), [
    ("http://127.0.0.1:8265", "'http://127.0.0.1:8265' is not a Ray cluster's address: give its head's host:port (port "
                              "6379 by default), not the dashboard's URL"),
    ("127.0.0.1:99999", "the port of the Ray cluster's address '127.0.0.1:99999' is out of range: 1 to 65535"),
    ("ray://127.0.0.1:0", "the port of the Ray cluster's address 'ray://127.0.0.1:0' is out of range: 1 to 65535")])
def test_an_address_that_cannot_be_a_clusters_is_refused_in_one_line(tmp_path, capsys, address, said):
    """(The dashboard's URL was Ray's five-line advice about RAY_ADDRESS; port 99999 was tried and 'refused'.)"""
    from nas.cli import main

    assert main(["search", "--space", "toy", "--budget", "2", "--run-dir", str(tmp_path / "run"),
                 "--address", address]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"nas search: error: {said}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a PID namespace (unshare) that hides the machine's "
                                              "other Ray clusters, which 'auto' would join")
def test_address_auto_where_no_cluster_runs_is_one_line(tmp_path):
    """``--address auto`` with no cluster on the machine was Ray's ConnectionError traceback (exit 1). Ray's
    'auto' joins any GCS process it sees, so the command runs in a PID namespace of its own, with an empty Ray
    temporary folder (no recorded cluster)."""
    (tmp_path / "ray-tmp").mkdir()
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path / "ray-tmp")}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "nas.cli", "search",
                           "--space", "toy", "--budget", "2", "--run-dir", "run", "--address", "auto"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip() == (
        "nas search: error: no Ray cluster runs on this machine for the address 'auto': start one (ray start --head) "
        "or give its head's address (host:port)"), done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ray-tmp"]


@pytest.mark.parametrize("argv", [["search", "--config"], ["search", "--resume"], ["search", "--address"],
                                  ["search", "--recipe"], ["search", "--space"], ["supernet", "train", "--address"],
                                  ["results"], ["report"], ["retrain"], ["serve"]])
def test_an_empty_value_is_refused_not_read_as_not_given(tmp_path, capsys, monkeypatch, argv):
    """--resume '' started a new search of the defaults (a real one, on Ray); --config '' searched without the
    file; --address '' and --recipe '' were ignored; a RUN_DIR of '' read the current folder."""
    from nas.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main([*argv, ""])
    err = capsys.readouterr().err.strip().splitlines()
    named = argv[-1] if argv[-1].startswith("--") else "RUN_DIR"
    assert info.value.code == 2 and err[-1].endswith(f"error: argument {named}: '' is empty; give a value")
    assert list(tmp_path.iterdir()) == []


def test_a_new_run_that_fails_to_start_is_taken_back(tmp_path, capsys):
    """Found only once its executor is built (an unknown table of the simulated executor; on Ray, too few CPUs: see
    test_ray_integration): the run directory is taken back, a folder the user made left as it was (empty), and the
    same --run-dir starts it again. Before, run.json, an empty journal and the lock stayed: 'already holds a run'."""
    from nas.cli import main

    (tmp_path / "mine").mkdir()
    for run in (tmp_path / "new" / "run", tmp_path / "mine"):
        argv = ["search", "--space", "nb201", "--executor", "simulated", "--budget", "3", "--run-dir", str(run)]
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        assert main([*argv, "--executor-option", "benchmark=nope"]) == 2
        assert "unknown tabular benchmark 'nope'" in capsys.readouterr().err
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # ("new" too is gone)
        assert main(argv) == 0 and (run / "run.json").is_file()


def test_a_run_of_a_space_that_cannot_be_imported_again_says_how_to_resume_and_retrain(tmp_path, capsys):
    """A space class made inside a function (or in a script run as __main__) is recorded as such; the command line
    cannot import it again, and says so and what to do, where it said "is not module:Class"."""
    import torch

    import nas
    from nas.cli import main
    from nas.oneshot import retrain
    from nas.search_spaces.toy import ToySpace
    from nas.train.simple import noop

    class Local(nas.SearchSpace):
        def dims(self):
            return {"a": [1, 2, 3]}

        def build(self, arch, task):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, task.num_classes))

    nas.search(Local(), "random", budget=2, executor="inprocess", data=None, train=noop, run_dir=tmp_path / "run")
    why = (f"space '{Local.__module__}:{Local.__qualname__}' was defined inside a function, so it cannot be imported "
           "again: hand in the same space from Python (nas.search(space, ..., resume=True) resumes its run, "
           "nas.retrain(run_dir, space=space) retrains its best)")
    assert main(["search", "--resume", str(tmp_path / "run"), "--budget", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{tmp_path / 'run' / 'run.json'}: {why}"), err
    assert main(["retrain", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip().endswith(why)
    out = retrain(tmp_path / "run", space=Local(), data="digits", epochs=1, executor="inprocess")  # (as it says)
    assert len(out) == 1 and (out["state"] == "COMPLETE").all()
    with pytest.raises(ValueError, match=r"space \{'class': 'toy', 'args': \{\}\} is not the space run"):
        retrain(tmp_path / "run", space=ToySpace(), data="digits", out_dir=tmp_path / "other")


def test_the_first_line_says_what_starts_before_the_checks(tmp_path):
    proc = nas_process(tmp_path, "search", "--strategy", "evoluton", "--workers", "3")
    assert proc.returncode == 2
    first = proc.stdout.splitlines()[0]
    assert first == ("search of macro with evoluton, budget 24, 3 workers on a private local Ray cluster "
                     "(127.0.0.1 only), started now; checking the inputs first"), first


def test_a_typed_module_space_is_imported_from_the_current_directory_and_a_resume_never_from_the_run(tmp_path):
    """`nas search --space tiny_space:Tiny` in the folder of tiny_space.py works with no PYTHONPATH (as `python -m`
    would); a resume run from inside the run directory, where a tiny_space.py has been put, is refused and
    changes no byte; from the folder it was made in, the same resume goes on."""
    (tmp_path / "tiny_space.py").write_text(TINY_SPACE)
    common = ["--executor", "inprocess", "--quiet", "--epochs", "1", "--strategy", "random"]
    made = nas_process(tmp_path, "search", "--space", "tiny_space:Tiny", *common, "--budget", "2", "--run-dir", "r")
    assert made.returncode == 0, made.stderr[-2000:]
    run = tmp_path / "r"
    assert json.loads((run / "run.json").read_text())["search"]["space"] == "tiny_space:Tiny"

    (run / "tiny_space.py").write_text(TINY_SPACE)  # code planted in the run directory
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.iterdir() if p.is_file()}
    refused = nas_process(run, "search", "--resume", ".", "--budget", "3")
    assert refused.returncode == 2 and "would be imported from inside the run directory" in refused.stderr, \
        refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.iterdir() if p.is_file()} == before

    (run / "tiny_space.py").unlink()
    resumed = nas_process(tmp_path, "search", "--resume", "r", "--budget", "3")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    results = [line for line in (run / "trials.jsonl").read_text().splitlines() if '"kind":"result"' in line]
    assert len(results) == 3 and "finished 3 trials" in resumed.stdout, resumed.stdout


def test_resume_help_says_that_it_imports_code():
    search = build_parser(["search"])._subparsers._group_actions[0].choices["search"]  # type: ignore[union-attr]
    text = " ".join(search.format_help().split())
    assert "IMPORTS CODE" in text and "refused" in text


@pytest.mark.ray
def test_a_ray_search_says_what_started_and_when_the_workers_are_ready_in_place_of_rays_auth_warning(tmp_path):
    proc = nas_process(tmp_path, "search", "--space", "toy", "--budget", "2", "--epochs", "1", "--workers", "1",
                       "--quiet", "--run-dir", "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("search of toy with evolution, budget 2, 1 worker on a private local Ray cluster")
    mode = os.environ.get("RAY_AUTH_MODE")  # (the suite's set-up: disabled; see conftest)
    auth = "Ray token auth on" if mode is None or mode == "token" else f"Ray token auth OFF (RAY_AUTH_MODE={mode}"
    assert any(line.startswith(auth) for line in lines), lines
    assert any(line.startswith("1 worker ready (") for line in lines), lines
    assert "Token authentication is enabled for this Ray cluster" not in proc.stdout + proc.stderr


def test_a_lock_taken_by_a_search_that_is_starting_is_said_so(tmp_path):
    """(between taking the lock and writing .lock.json, after its checks, the holder read as "holder unknown")"""
    lock = RunLock(tmp_path).acquire()
    try:
        with pytest.raises(ValueError, match=r"is in use by another search \(one that is starting: it has not written "
                                             r"its pid yet\); wait for it to end"):
            RunLock(tmp_path).acquire()
        lock.write_holder()
        with pytest.raises(ValueError, match=rf"is in use by another search \(pid {os.getpid()} on host "):
            RunLock(tmp_path).acquire()
    finally:
        lock.release()

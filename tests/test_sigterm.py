"""SIGTERM (``kill``, a batch scheduler's stop) stops a real `nas search` as Ctrl-C does: no new trials, the run
journaled as interrupted, exit 130 with the line to resume it, and the resume finishes the budget. On Ray, whose
driver puts its own SIGTERM handler in place at ``ray.init`` (a stack dump, exit 15, the run left 'failed'), too.

The signal is sent by the search's own training function when trial 3 starts (the driver's pid comes in the
environment, which Ray's workers inherit), so it arrives at a known point without the test waiting on a clock.
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
from nas.run.supernet_store import supernet_status
from tests.helpers import wait_until

TRAIN = textwrap.dedent("""
    import os, signal

    def train(ctx):
        if ctx.trial.trial_id == 3 and not os.path.exists("signalled"):
            open("signalled", "w").close()
            os.kill(int(os.environ["NAS_TEST_DRIVER"]), signal.SIGTERM)
        ctx.report(epoch=1, val_acc=sum(ctx.trial.arch.values()) / 20)
""")


def search(cwd, *args):
    """A real `nas search` in ``cwd``: its exit code and output (the driver's pid in its environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    argv = [sys.executable, "-c", "import os, sys; os.environ['NAS_TEST_DRIVER'] = str(os.getpid()); "
            "from nas.cli import main; sys.exit(main(sys.argv[1:]))", "search", "--space", "toy", "--strategy",
            "random", "--budget", "12", "--dataset", "none", "--train-function", "sig:train", "--workers", "1",
            "--run-dir", "run", *args]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("executor", ["inprocess", pytest.param("ray", marks=pytest.mark.ray)])
def test_sigterm_stops_gracefully_and_the_run_resumes(tmp_path, executor):
    (tmp_path / "sig.py").write_text(TRAIN)
    code, out = search(tmp_path, "--executor", executor, "--cpus-per-trial", "0.5")
    assert (tmp_path / "signalled").exists()
    assert code == 130 and "Traceback" not in out and "SIGTERM received" not in out, out[-3000:]
    assert "stopping (SIGTERM): no new trials, cancelling the running ones (a second SIGTERM aborts at once)" in out
    assert "resume with: nas search --resume run" in out
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "interrupted" and status["finished"] < 12
    done = subprocess.run([sys.executable, "-m", "nas.cli", "search", "--resume", "run"], cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    df = nas.load_results(tmp_path / "run")
    assert sorted(df["trial_id"]) == list(range(12)) and (df["state"] == "COMPLETE").all()


NEVER_UP = textwrap.dedent("""
    import os, signal, threading

    if os.getpid() != int(os.environ["NAS_TEST_DRIVER"]):  # (a Ray worker unpickling train: an actor starting)
        open(f"worker-{os.getpid()}", "w").close()
        try:  # (one signal, from the first rank of a gang)
            os.close(os.open("signalled", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            os.kill(int(os.environ["NAS_TEST_DRIVER"]), signal.SIGTERM)
        except FileExistsError:
            pass
        threading.Event().wait()  # (its actor is never up)

    def train(ctx):
        ctx.report(epoch=1, val_acc=0.5)
""")


@pytest.mark.ray
@pytest.mark.parametrize("gang", [[], ["--trial-workers", "2"]], ids=["trainers", "gang"])
def test_sigterm_while_the_workers_start_ends_the_start_at_once(tmp_path, gang):
    """A stop asked for while the workers start (Ray placing them, their constructors running: up to
    ``start_timeout``) ends the start at once, exit 130, and takes the new run back; it waited the whole
    start_timeout, then ended in an error with a half-made run directory left behind. The workers' constructors
    never return (they block where they unpickle the training function, after sending the signal)."""
    (tmp_path / "sig.py").write_text(NEVER_UP)
    code, out = search(tmp_path, "--executor", "ray", "--cpus-per-trial", "0.5", "--quiet",
                       "--executor-option", "start_timeout=60", *gang)
    assert (tmp_path / "signalled").exists()
    assert code == 130 and "Traceback" not in out, out[-3000:]
    assert "aborted before the search started; nothing was kept in run" in out, out[-3000:]
    assert not (tmp_path / "run").exists()  # (taken back, as a refused start is)
    workers = [int(f.name.removeprefix("worker-")) for f in tmp_path.glob("worker-*")]

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    assert workers and wait_until(lambda: all(map(gone, workers)), "the blocked workers to end", timeout=60)


def test_sigterm_ends_other_commands_as_ctrl_c_does(tmp_path):
    """`nas supernet train` (no graceful stop of its own): SIGTERM ends it as Ctrl-C, its epochs journaled, the run
    stopped, exit 130 (it was killed by the signal), with the command that continues it; that command, only the
    epochs raised, does."""
    proc = subprocess.Popen([sys.executable, "-m", "nas.cli", "supernet", "train", "--epochs", "10000", "--executor",
                             "inprocess", "--run-dir", "sn", "--quiet", "--threads", "1"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (tmp_path / "sn" / "epochs.jsonl").is_file()
                   and (tmp_path / "sn" / "epochs.jsonl").read_text().count("\n") >= 1,
                   "the supernet's first journaled epoch", timeout=120)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    status = supernet_status(tmp_path / "sn")
    assert status["state"] == "stopped"  # (as nas status says it: its lock let go)
    resume = "nas supernet train --resume --run-dir sn"
    assert proc.returncode == 130 and out.strip().endswith(
        f"nas supernet train: interrupted: stopped after epoch {status['epochs_done']} of 10000; continue with: "
        f"{resume}"), out[-2000:]
    done = subprocess.run([sys.executable, "-m", "nas.cli", *resume.split()[1:], "--epochs",
                           str(status["epochs_done"] + 1), "--executor", "inprocess", "--quiet", "--threads", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert supernet_status(tmp_path / "sn")["epochs_done"] == status["epochs_done"] + 1

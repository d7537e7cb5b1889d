"""How the ``nas`` process ends: with its own exit code and line, whatever is still running in it, and from the
first moment a signal can reach it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SPIN = textwrap.dedent("""
    import torch

    def spin(ctx):  # a trial that never reports: its thread is inside torch whenever the process ends
        a = torch.ones(300, 300)
        while True:
            a = (a @ a).clamp_(max=1.0)
""")


def test_a_search_that_ends_with_a_trial_training_in_this_process_exits_with_its_own_code(tmp_path):
    """The time budget ended the search while its in-process trial was inside torch; the interpreter's exit then
    killed that thread in C++ code: "terminate called without an active exception", exit 134 (3 of 3 runs before;
    a full disk met mid-trial did the same after the search's own one-line error)."""
    (tmp_path / "spinmod.py").write_text(SPIN)
    done = subprocess.run([sys.executable, "-m", "nas.cli", "search", "--space", "toy", "--strategy", "random",
                           "--executor", "inprocess", "--train-function", "spinmod:spin", "--dataset", "none",
                           "--time-budget", "1", "--budget", "2", "--quiet", "--run-dir", "run"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-2000:]
    assert "results in run" in done.stdout


INTERRUPTED_WHILE_BUILDING = textwrap.dedent("""
    import os, signal, sys
    import nas.cli

    real, sent = nas.cli.build_parser, getattr(signal, sys.argv[1])

    def build_parser(commands):  # the signal arrives while the command's module (torch with it) is imported
        os.kill(os.getpid(), sent)
        return real(commands)

    nas.cli.build_parser = build_parser
    sys.argv = ["nas", "retrain", "run"]
    nas.cli.entry()
""")


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_command_is_loaded_ends_it_as_interrupted(tmp_path, signal_name):
    """(Ctrl-C there was a KeyboardInterrupt traceback; SIGTERM a silent death, exit -15: the handler that makes
    SIGTERM a Ctrl-C was set only once the command ran.)"""
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_BUILDING, signal_name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 130 and done.stderr.strip() == "nas retrain: interrupted", (done.returncode,
                                                                                         done.stderr[-2000:])

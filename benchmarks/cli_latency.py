"""``nas bench cli-latency``: seconds from Enter to each command's answer, beside the interpreter's own start-up.

Makes a run directory of ``--trials`` finished trials through the real loop and run store (a simulated NAS-Bench-201
search: random strategy, no Ray, no training), then runs each command as a fresh process ``--repeats`` times,
the commands alternated so that a change in the machine's load hits all of them, and prints each one's median
wall seconds (min-max) and median CPU seconds (user + system of the process and its children, which load on a
shared machine does not inflate). The fixed costs come first on the same table: ``python -c pass`` (the floor
every command pays) and ``python -c "import torch"`` (what torch alone costs). Bad input (a misspelt space,
strategy, option, scheduler or objective, a missing dataset, a run directory another search holds: this process
holds its lock) must fail with status 2 and one line; ``first line of nas search`` is the seconds until a real
search (simulated executor) prints its first line. Nothing is asserted: the figures are printed.

>>> [name for name, _ in commands("RUN", "NEW", "python")][:3]
['python -c pass', 'python -c "import torch"', 'nas --version']
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from nas.cli.common import file_arg

from . import add_experiment
from .harness import at_least, text_table, write_json

#: what each command must end with: 0 (it answers) or 2 (bad input, one line)
EXPECT_ERROR = "error"


def commands(run: str, new: str, python: str) -> list[tuple[str, list[str]]]:
    """(label, argv) of every timed command; ``run``: the finished run directory, ``new``: a directory prefix for
    runs that must never be made, ``python``: the interpreter."""
    nas = [python, "-m", "nas.cli"]
    search = [*nas, "search", "--run-dir"]
    return [
        ("python -c pass", [python, "-c", "pass"]),
        ('python -c "import torch"', [python, "-c", "import torch"]),
        ("nas --version", [*nas, "--version"]),
        ("nas search --help", [*nas, "search", "--help"]),
        ("nas results RUN", [*nas, "results", run]),
        ("nas best RUN", [*nas, "best", run]),
        ("nas status RUN", [*nas, "status", run]),
        ("nas strategies", [*nas, "strategies"]),
        ("nas spaces", [*nas, "spaces"]),
        ("nas schedulers", [*nas, "schedulers"]),
        ("error: --space nb202", [*search, f"{new}/a", "--space", "nb202"]),
        ("error: --strategy evoluton", [*search, f"{new}/b", "--strategy", "evoluton"]),
        ("error: -o populaton=5", [*search, f"{new}/c", "--strategy", "evolution", "-o", "populaton=5"]),
        ("error: --scheduler ashaa", [*search, f"{new}/d", "--scheduler", "ashaa"]),
        ("error: --objective val_acc:maxx", [*search, f"{new}/e", "--objective", "val_acc:maxx"]),
        ("error: --dataset missing.npz", [*search, f"{new}/f", "--dataset", f"{new}/missing.npz"]),
        ("error: --resume RUN (locked)", [*search[:-1], "--resume", run]),
    ]


def first_line_argv(python: str, run_dir: str) -> list[str]:
    """A real search (simulated NAS-Bench-201, no Ray) whose first line is timed."""
    return [python, "-m", "nas.cli", "search", "--space", "nb201", "--strategy", "random", "--executor", "simulated",
            "--dataset", "none", "--budget", "20", "--quiet", "--run-dir", run_dir]


def timed(argv: Sequence[str], *, first_line: bool = False) -> tuple[float, float, int, str]:
    """Wall seconds (to the first line of stdout with ``first_line``, else to the exit), CPU seconds of the process
    (user + system, its children included), exit status and the last line it wrote."""
    env = {**os.environ, "COLUMNS": "100", "RAY_USAGE_STATS_ENABLED": "0"}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert proc.stdout is not None
    lines, wall = [], None
    for raw in proc.stdout:
        if wall is None and first_line:
            wall = time.perf_counter() - start
        lines.append(raw.decode(errors="replace").rstrip())
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = wall if wall is not None else time.perf_counter() - start
    text = next((line for line in reversed(lines) if line.strip()), "")
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, text


def make_run(run_dir: Path, trials: int) -> None:
    """A finished run of ``trials`` trials written through the real store (simulated NB201, no training)."""
    import nas

    nas.search("nb201", "random", budget=trials, executor="simulated", data=None, run_dir=run_dir, seed=0,
               progress=False)


def cmd_cli_latency(args: argparse.Namespace) -> int:
    at_least(1, repeats=args.repeats, trials=args.trials)
    from nas.run.lock import RunLock

    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        make_run(run, args.trials)
        print(f"made a run of {args.trials} trials in {time.perf_counter() - t0:.1f} s ({run}); "
              f"{args.repeats} alternated repeats of each command", flush=True)
        todo = commands(str(run), f"{tmp}/new", python)
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in todo}
        samples["first line of nas search"] = []
        last: dict[str, tuple[int, str]] = {}
        lock = RunLock(run).acquire()  # (a search holds the run: the resume must be refused at once)
        lock.write_holder()
        try:
            for rep in range(args.repeats):
                for label, argv in todo:
                    wall, cpu, code, text = timed(argv)
                    samples[label].append((wall, cpu))
                    last[label] = (code, text)
                wall, cpu, code, text = timed(first_line_argv(python, f"{tmp}/first-{rep}"), first_line=True)
                samples["first line of nas search"].append((wall, cpu))
                last["first line of nas search"] = (code, text)
        finally:
            lock.release()
    rows = [["command", "wall s (median)", "min-max", "CPU s", "exit", "what it said (last line)"]]
    out = []
    for label, values in samples.items():
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        code, text = last[label]
        ok = code == (2 if label.startswith(EXPECT_ERROR) else 0)
        cpu_text = "-" if label.startswith("first line") else f"{statistics.median(cpus):.2f}"  # (it runs on)
        rows.append([label, f"{statistics.median(walls):.2f}", f"{min(walls):.2f}-{max(walls):.2f}", cpu_text,
                     f"{code}{'' if ok else ' (!)'}", text[:60]])
        out.append({"command": label, "wall_median": statistics.median(walls), "wall": walls, "cpu": cpus,
                    "exit": code, "said": text})
        if label == 'python -c "import torch"':
            rows.append(["-" * 8, "", "", "", "", ""])
    print(f"load average {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} cores); the first two rows are fixed "
          "costs: the interpreter alone, and torch alone")
    print(text_table(rows, rule=True))
    write_json(args.json, out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_cli_latency)
    p.add_argument("--trials", type=int, default=1000, help="finished trials of the run read (default 1000)")
    p.add_argument("--repeats", type=int, default=5, help="fresh processes per command (default 5)")
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures here")

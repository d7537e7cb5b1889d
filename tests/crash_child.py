"""A search in a process of its own that SIGKILLs itself at a planned point (the helper of tests/test_crashes.py).

Run as ``python tests/crash_child.py SPEC_JSON``. SPEC names the search (``strategy``, ``options``, ``scheduler``,
``scheduler_options``, ``budget``, ``epochs``, ``executor``: inprocess or ray, ``address``, ``workers``, ``resume``)
and at most one kill point, counted over the whole run directory (earlier sessions included):

- ``{"records": K}``: once the journal holds K records (the K-th written and handed to the OS), mid-write of
  nothing: the process dies between two records;
- ``{"promotion": P}``: right after the P-th promotion (a submit that continues a paused trial) is journaled;
- ``{"snapshot": S}``: in the S-th snapshot write of this process, after its temporary file is whole and before
  the rename (a crash mid-snapshot).

The kill is a real SIGKILL of this process: nothing runs after it (no ``finally``, no lock release, no flush).
The hooks only watch: the journal's writes through the store's ``opener`` (a documented run option) and the
snapshot's rename through :func:`sys.setprofile`; the search itself is ``nas.search`` as the CLI runs it.

The tests start each search with :func:`launch`: a process forked from multiprocessing's fork server, which has
imported this module, torch (with the torch._dynamo its first optimizer step loads), pandas and scikit-learn once
(~6 s of each fresh interpreter's ~7 s before the search's first trial). Its own process all the same: SIGKILLed,
it leaves only what it wrote to the run directory, and the next one resumes from there.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers import JournalFile  # (tests/ is on the path: this module is run or imported from there)

import nas
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.settings import TrainSettings


def quality(arch):
    return math.exp(toy_score(arch) / 10)  # in (0, 1], 1 at the toy space's optimum


def curve(ctx):
    """A learning curve towards the architecture's quality (learning-rate scaled, so PBT's hparams matter),
    continued from a checkpoint's epoch (promotions, PBT segments); deterministic, no training."""
    state = ctx.checkpoint.load()
    start = int(state["epoch"]) if state else 0
    lr = float(ctx.hparams.get("lr", 0.1))
    for epoch in range(start + 1, start + ctx.epochs + 1):
        if ctx.report(epoch=epoch, val_acc=quality(ctx.trial.arch) * (1 - 0.5 ** (epoch * min(lr * 10, 2.0)))):
            return


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillingJournal(JournalFile):
    """The journal file, appending as usual; SIGKILLs the process once the planned record is handed to the OS."""

    def __init__(self, path: Path, kill: dict) -> None:
        self.kill = kill
        self.records = path.read_bytes().count(b"\n") if path.exists() else 0
        self.promotions = sum(1 for line in path.read_bytes().splitlines() if _promotion(line)) if path.exists() else 0
        super().__init__(path)

    def write(self, data: bytes) -> int:
        n = self.f.write(data)
        lines = data.splitlines()
        due = False
        for line in lines:
            self.records += 1
            self.promotions += _promotion(line)
            due |= self.records == self.kill.get("records") or (
                _promotion(line) and self.promotions == self.kill.get("promotion"))
        if due:
            self.f.flush()  # in the OS: it outlives the process
            die()
        return n


def _promotion(line: bytes) -> bool:
    if b'"kind":"submit"' not in line:
        return False
    trial = json.loads(line)["trial"]
    return trial.get("checkpoint_from") == trial["trial_id"]


def kill_mid_snapshot(n: int) -> None:
    """SIGKILL in the n-th snapshot write, just before its rename (the temporary file whole, the old one in place)."""
    seen = [0]

    def profile(frame, event, arg):
        if (event == "c_call" and arg is os.replace and frame.f_code.co_name == "atomic_write"
                and Path(frame.f_locals["path"]).name == "snapshot.json"):
            seen[0] += 1
            if seen[0] == n:
                die()

    sys.setprofile(profile)


def main(spec: dict) -> None:
    kill = spec.get("kill") or {}
    run_options = {"snapshot_every": spec.get("snapshot_every", 4), "snapshot_seconds": 1e9, "snapshot_share": None,
                   "replay_seconds": None}
    if "records" in kill or "promotion" in kill:
        run_options["opener"] = lambda path: KillingJournal(path, kill)
    if "snapshot" in kill:
        kill_mid_snapshot(kill["snapshot"])
    data = nas.load_dataset("digits") if spec.get("data", True) else None
    settings = TrainSettings(epochs=spec.get("epochs", 9), device="cpu", threads=1, measure_costs=False, seed=0)
    executor = spec.get("executor", "inprocess")
    df = nas.search(ToySpace(), spec["strategy"], budget=spec["budget"], executor=executor, seed=0, data=data,
                    workers=spec.get("workers", 2), settings=settings, train=curve,
                    strategy_options=spec.get("options") or {}, scheduler=spec.get("scheduler", "none"),
                    scheduler_options=spec.get("scheduler_options") or {}, run_dir=spec["run_dir"],
                    resume=spec.get("resume", False), address=spec.get("address"), run_options=run_options)
    print(json.dumps({"finished": len(df)}), flush=True)


#: what the fork server imports once: the search's own imports (its plugins by registry, the executors' modules
#: it checks, the progress display's notebook test) and what the first optimizer step loads (torch._dynamo)
PRELOAD = ["crash_child", "nas.api", "nas.strategies", "nas.schedulers", "nas.search_spaces", "nas.engine.inprocess",
           "nas.engine.ray_pool", "nas.engine.simulated", "nas.monitor.progress", "nas.monitor.status",
           "nas.train.runner", "nas.train.inherit", "torch._dynamo", "torch.optim", "sklearn.datasets", "pandas",
           "optuna", "IPython", "ray"]


def _forked(spec: dict, out: str, err: str) -> None:
    """The forked process: its stdout and stderr into files (a traceback too), then the search."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    if spec.get("executor") == "ray":  # Ray's workers cannot import this module: its training function goes by value
        import ray

        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    main(spec)


def launch(spec: dict, logs: Path, timeout: float = 600.0) -> subprocess.CompletedProcess:
    """Run :func:`main` with ``spec`` in a process of its own, forked from the fork server; its exit status
    (-9: SIGKILLed; 1: an exception, its traceback in stderr) and output as :func:`subprocess.run` gives them."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # (read when the server starts: the first launch)
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "stdout.txt", logs / "stderr.txt"
    proc = context.Process(target=_forked, args=(spec, str(out), str(err)))
    proc.start()
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise TimeoutError(f"the search did not end within {timeout} s: {err.read_text()[-3000:]}")
    return subprocess.CompletedProcess(["crash_child", json.dumps(spec)], proc.exitcode, out.read_text(),
                                       err.read_text())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

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
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from pathlib import Path

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


class KillingJournal:
    """The journal file, appending as usual; SIGKILLs the process once the planned record is handed to the OS."""

    def __init__(self, path: Path, kill: dict) -> None:
        self.f = open(path, "ab")  # noqa: SIM115 (the journal's own file object)
        self.kill = kill
        self.records = path.read_bytes().count(b"\n") if path.exists() else 0
        self.promotions = sum(1 for line in path.read_bytes().splitlines() if _promotion(line)) if path.exists() else 0

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

    def flush(self) -> None:
        self.f.flush()

    def fileno(self) -> int:
        return self.f.fileno()

    def close(self) -> None:
        self.f.close()


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


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

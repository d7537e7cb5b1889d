"""Crash-safe runs: the strategy's saved state, resuming a run directory, and a graceful Ctrl-C.

A run directory can be continued after any crash of the driver (SIGKILL included) because of one
ordering, kept by :class:`nas.loop.SearchLoop`:

1. a finished trial is appended to ``trials.jsonl`` (and fsynced) before the strategy is told of it;
2. after every round of tells and asks, before the loop waits again, ``strategy.pkl`` is replaced
   atomically (:func:`nas.journal.atomic_write`) by the strategy's ``state_dict()``, the number of
   journal records the strategy has been told, and the trials in flight.

So the saved state covers every trial that can be journaled later (each was asked before a save), and
resuming (``nas.search(..., run_dir=RUN, resume=True)`` or ``nas search --resume RUN``) does this:

- journal records beyond the saved count were journaled but never told: they are told now, in order;
- saved in-flight trials missing from the journal are re-queued under their own ids;
- trials asked after the last save were never saved: the restored strategy asks them again, with the
  same ids (a restored strategy asks what the original would have asked next).

The run ends with exactly ``budget`` finished trials, each trial id journaled once.

>>> stop = StopSignal("wait")
>>> stop.requested, stop.mode
(False, 'wait')
>>> stop.request(); stop.requested
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import pickle
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from nas.journal import RunDir, atomic_write
from nas.strategy import Strategy
from nas.types import Trial

STATE_FILE = "strategy.pkl"
STATE_FORMAT = 1
INTERRUPT_MODES = ("cancel", "wait")
#: run.json keys that make a run what it is: resuming with other values would mix two searches
IDENTITY_KEYS = ("space", "strategy", "strategy_options", "seed", "dataset")
#: TrainSettings fields that change results (device, amp, threads are how, not what, to train)
SETTINGS_KEYS = ("epochs", "lr", "batch_size", "weight_decay", "momentum", "optimizer", "max_params", "seed")


@dataclasses.dataclass
class SavedState:
    """What ``strategy.pkl`` holds."""

    strategy: str
    state: dict[str, Any]
    journaled: int  # journal records the saved strategy has been told
    inflight: list[Trial]  # asked, not yet journaled


def save_state(path: Path, strategy: Strategy, journaled: int, inflight: Sequence[Trial]) -> None:
    """Replace ``path`` atomically: a crash mid-write leaves the previous state whole."""
    atomic_write(path, pickle.dumps({
        "format": STATE_FORMAT, "strategy": strategy.name, "state": strategy.state_dict(),
        "journaled": journaled, "inflight": [t.to_dict() for t in inflight],
    }, protocol=pickle.HIGHEST_PROTOCOL))


class _DataOnly(pickle.Unpickler):
    """Reads plain data only (dicts, lists, str, bytes, numbers): every class or function a pickle names is refused,
    so loading one can call nothing (Python's pickle docs, "Restricting Globals"). Stopgap until JSON snapshots."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, and nas reads only plain data from a run directory")


def load_state(path: Path) -> SavedState | None:
    """The saved state, or None when there is none yet."""
    if not path.is_file():
        return None
    try:
        raw = _DataOnly(io.BytesIO(path.read_bytes())).load()
    except Exception as e:  # any unpickling failure means the file is not ours, not intact, or not plain data
        raise ValueError(f"{path} is corrupt or not a saved strategy state: {type(e).__name__}: {e}") from None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"{path} was written by an incompatible version (format {found!r}, "
                         f"this version reads {STATE_FORMAT})")
    return SavedState(raw["strategy"], raw["state"], int(raw["journaled"]),
                      [Trial.from_dict(t) for t in raw["inflight"]])


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def check_same_run(run: RunDir, saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise ValueError naming every difference between the run's ``run.json`` and this call that
    would change what the search is (space, strategy and its options, seed, data, training settings),
    and when the budget is lowered."""
    diffs = [(k, saved.get(k), current.get(k)) for k in IDENTITY_KEYS if _plain(saved.get(k)) != _plain(current.get(k))]
    old_s, new_s = saved.get("settings") or {}, current.get("settings") or {}
    diffs += [(f"settings.{k}", old_s.get(k), new_s.get(k)) for k in SETTINGS_KEYS
              if _plain(old_s.get(k)) != _plain(new_s.get(k))]
    if diffs:
        said = "; ".join(f"{k}: run has {a!r}, this call {b!r}" for k, a, b in diffs)
        raise ValueError(f"cannot resume {str(run.path)!r}: it is a different search ({said})")
    if current["budget"] < saved.get("budget", 0):
        raise ValueError(f"budget may only be raised when resuming: {str(run.path)!r} has budget "
                         f"{saved['budget']}, got {current['budget']}")


def resume_settings(run_dir: str) -> dict[str, Any]:
    """``run.json`` of ``run_dir`` as :class:`nas.api.SearchConfig` fields (what ``--resume`` runs)."""
    cfg = RunDir(run_dir).config()
    missing = [k for k in ("space", "strategy", "budget", "settings") if k not in cfg]
    if missing:
        raise ValueError(f"{run_dir!r}/run.json lacks {missing}: it cannot be resumed from the command line")
    s = cfg["settings"]
    values = {
        "space": cfg["space"], "strategy": cfg["strategy"], "strategy_options": cfg.get("strategy_options", {}),
        "budget": cfg["budget"], "workers": cfg.get("workers", 2), "dataset": cfg.get("data") or cfg.get("dataset"),
        "seed": cfg.get("seed", 0), "run_dir": run_dir, "executor": cfg.get("executor", "ray"),
        "cpus_per_trial": cfg.get("cpus_per_trial", 1.0), "gpus_per_trial": cfg.get("gpus_per_trial", 0.0),
        "max_retries": cfg.get("max_retries", 2),
    }
    values.update({k: s[k] for k in ("epochs", "lr", "batch_size", "optimizer", "device", "amp") if k in s})
    return values


class StopSignal:
    """Asks a running :class:`nas.loop.SearchLoop` to stop submitting trials. ``mode`` says what
    becomes of those in flight: ``"cancel"`` stops them (they are re-run on resume), ``"wait"`` lets
    them finish and journals them."""

    def __init__(self, mode: str = "cancel") -> None:
        if mode not in INTERRUPT_MODES:
            raise ValueError(f"unknown interrupt mode {mode!r}; known: {', '.join(INTERRUPT_MODES)}")
        self.mode = mode
        self.requested = False

    def request(self) -> None:
        self.requested = True


@contextlib.contextmanager
def stop_on_sigint(stop: StopSignal, stream: TextIO | None = None) -> Iterator[StopSignal]:
    """While inside, the first SIGINT (Ctrl-C) requests ``stop``; a second raises KeyboardInterrupt
    at once. The previous handler is restored on leaving. Main thread only (as Python's signals)."""
    out = stream or sys.stderr

    def handler(signum: int, frame: object) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()
        what = "cancelling" if stop.mode == "cancel" else "waiting for"
        print(f"\nstopping: no new trials, {what} the running ones (Ctrl-C again aborts at once)",
              file=out, flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)

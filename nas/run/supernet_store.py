"""The owner of a supernet training run's directory: its layout, every write to it, and the lock, with a search
run's guarantees, from the same parts (:mod:`nas.run.lock`, :func:`nas.run.files.atomic_write`,
:class:`nas.run.journal.JournalWriter`, :mod:`nas.run.snapshot`).

Layout: ``run.json`` (what the run is: space, task, data, sampling, seed, training settings, epochs),
``epochs.jsonl`` (a journal: one ``{"kind": "epoch", ...}`` record per epoch trained, fsynced), ``checkpoint.json``
+ its safetensors file (everything the next epoch depends on: :meth:`nas.train.supernet_spos.SPOSTrainer.state_dict`,
plain data and tensors, never pickle), ``supernet.safetensors`` (the weights searches read,
:mod:`nas.train.supernet_io`), ``status.json``, ``.lock`` + ``.lock.json``.

After each epoch: the weights, the checkpoint (which also holds the epoch's record), then the journal record
(fsync), then the status. A crash between the weights and the checkpoint leaves the weights one epoch ahead,
which the resume trains again to the same weights (a crash before the weights left the last epoch's weights
stale where that epoch was the run's last); one between the checkpoint and the journal leaves the checkpoint one
epoch ahead of the journal, and a resume appends the missing record from the checkpoint, so the journal always
lists exactly the epochs the checkpoint holds. A full disk stops the run in one line (:class:`DiskFull`) with
what it keeps.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp()) / "sn"
>>> store = SupernetStore.create(d, {"space": "macro", "epochs": 2})
>>> store.on_epoch({"epoch": 1, "train_loss": 2.0}, {"epoch": 1}, b"weights")
>>> SupernetStore.create(d, {"space": "macro", "epochs": 2})
Traceback (most recent call last):
...
nas.run.lock.InUse: run directory '...' is in use by another search (pid ...); wait for it to end or choose ...
>>> store.close()
>>> store = SupernetStore.resume(d, {"space": "macro", "epochs": 3})
>>> [r["epoch"] for r in store.records], store.checkpoint()["epoch"]
([1], 1)
>>> store.close()
>>> SupernetStore.resume(d, {"space": "nb201", "epochs": 3})
Traceback (most recent call last):
...
ValueError: cannot resume '...': it is a different supernet run (space: 'macro' there, 'nb201' here)
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nas.run.files import atomic_write, check_regular, os_error_text, read_file
from nas.run.journal import DiskFull, JournalWriter, cut_torn_tail
from nas.run.layout import CHECKPOINT, EPOCHS, RUN_JSON, STATUS, SUPERNET_WEIGHTS, new_run, read_run_json, take_back
from nas.run.lock import RunLock
from nas.run.snapshot import read_snapshot, write_snapshot

KIND, FORMAT = "supernet", 1  # (run.json also carries the run format of nas.run.config)
MAY_CHANGE = ("epochs", "resumed", "created", "run_dir")  # what a resume may differ in


class EpochJournal(JournalWriter):
    """``epochs.jsonl``: the journal writer's file handling (torn tail cut) for epoch records; a failed write is
    the OSError itself, which the store says in its own words."""

    def _error(self, e: OSError) -> Exception:
        return e

    def write_epoch(self, record: dict[str, Any]) -> None:
        self._write((json.dumps({"kind": "epoch", **record}, default=str) + "\n").encode())
        self.sync()


def read_epochs(path: Path) -> list[dict[str, Any]]:
    """The epoch records of ``path``; a torn last line is ignored, any other bad line is a ValueError."""
    check_regular(path)  # (a FIFO was "no records", then the resume waited on it forever)
    if not path.is_file():
        return []
    out = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                break
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                rec = None
            if not isinstance(rec, dict) or rec.get("kind") != "epoch" or not isinstance(rec.get("epoch"), int):
                raise ValueError(f"{path} line {number} is not an epoch record; the journal is corrupt")
            for key in ("train_loss", "train_acc"):  # (what `nas status` shows of the last epoch, as numbers)
                if key in rec and type(rec[key]) not in (int, float):
                    raise ValueError(f"{path} line {number} is an epoch record of the wrong shape ({key}: expected a "
                                     f"number, got {type(rec.get(key)).__name__}); the journal is corrupt")
            out.append(rec)
    return out


class SupernetStore:
    """The one writer of a supernet run directory; make it with :meth:`create` or :meth:`resume` (both lock)."""

    def __init__(self, path: Path, lock: RunLock, records: list[dict[str, Any]]) -> None:
        self.path, self._lock = path, lock
        self.records = records
        self.journal = EpochJournal(path / EPOCHS)
        self._started = time.time()
        self._undo: Callable[[], None] | None = None  # takes a new run back (discard), until it holds an epoch

    @classmethod
    def create(cls, path: str | os.PathLike[str], config: dict[str, Any]) -> SupernetStore:
        """A new run in ``path``, which must be a new or empty directory (:func:`nas.run.layout.new_run`: refused,
        naming what it holds, otherwise; nothing is left behind when it fails, a full disk included)."""
        path = Path(path)
        with new_run(path) as (lock, wrote, undo):
            atomic_write(path / RUN_JSON, _json({**config, "kind": KIND, "supernet_format": FORMAT}))
            wrote.append(path / RUN_JSON)
        store = cls(path, lock, [])
        store._undo = undo
        return store

    @classmethod
    def resume(cls, path: str | os.PathLike[str], config: dict[str, Any]) -> SupernetStore:
        """Continue the run in ``path`` as ``config``; every check runs before anything is written."""
        path = Path(path)
        prior = read_run(path)
        for name in (EPOCHS, CHECKPOINT, SUPERNET_WEIGHTS, STATUS):  # (a folder there: found after an epoch trained)
            check_regular(path / name)
        lock = RunLock(path).acquire()
        try:
            diffs = [f"{k}: {there!r} there, {here!r} here" for k, there, here in _differences(prior, config)
                     if k not in (*MAY_CHANGE, "kind", "supernet_format")]
            if diffs:
                raise ValueError(f"cannot resume {str(path)!r}: it is a different supernet run ({'; '.join(diffs)})")
            records = read_epochs(path / EPOCHS)
            state = _read_checkpoint(path)
            done = 0 if state is None else int(state["epoch"])
            if config.get("epochs", done) < done:
                raise ValueError(f"{str(path)!r} has trained {done} epochs; epochs={config['epochs']} is fewer")
            listed = [r["epoch"] for r in records]
            if len(records) not in (done, done - 1) or listed != list(range(1, len(records) + 1)):
                raise ValueError(f"{path / EPOCHS} lists epochs {listed} but the checkpoint "
                                 f"holds {done}; the run directory is inconsistent")
            try:
                lock.write_holder()
                cut_torn_tail(path / EPOCHS)
                store = cls(path, lock, records)
                if len(records) == done - 1 and state is not None:  # the crash fell between checkpoint and journal
                    store._journal(state["record"])
                atomic_write(path / RUN_JSON, _json({**prior, "epochs": config.get("epochs", prior.get("epochs")),
                                                     "resumed": [*prior.get("resumed", []), time.time()]}))
            except OSError as e:
                raise _write_error(path, e, records[-1]["epoch"] if records else 0) from None
        except BaseException:
            lock.release()
            raise
        return store

    def checkpoint(self) -> dict[str, Any] | None:
        """The last checkpoint's state (:meth:`nas.train.supernet_spos.SPOSTrainer.state_dict`), or None."""
        state = _read_checkpoint(self.path)
        return None if state is None else state["state"]

    def on_epoch(self, record: dict[str, Any], state: dict[str, Any], weights: bytes) -> None:
        """An epoch trained: the weights searches read, its checkpoint, its journal record, the status."""
        from nas.train.supernet_io import WEIGHTS  # (here: `nas status` reads this store without torch)

        try:
            atomic_write(self.path / WEIGHTS, weights)
            write_snapshot(self.path / CHECKPOINT, {"format": FORMAT, "record": record, "state": state,
                                                    "epoch": record["epoch"]})
        except OSError as e:
            raise self._write_error(e) from None
        self._journal(record)

    def _journal(self, record: dict[str, Any]) -> None:
        try:
            self.journal.write_epoch(record)
        except OSError as e:
            raise self._write_error(e) from None
        self.records.append({"kind": "epoch", **record})
        self.write_status("running")

    def write_status(self, state: str, epochs: int | None = None) -> None:
        last = self.records[-1] if self.records else {}
        try:
            atomic_write(self.path / STATUS, _json({
                "kind": KIND, "state": state, "epoch": last.get("epoch", 0), "epochs": epochs,
                "train_loss": last.get("train_loss"), "updated": time.time(), "started": self._started,
                "pid": os.getpid(), "host": socket.gethostname()}))
        except OSError as e:
            raise self._write_error(e) from None

    def _write_error(self, e: OSError) -> ValueError:
        new = self._undo is not None and not self.records  # (discard() takes such a run back)
        return _write_error(self.path, e, None if new else self.records[-1]["epoch"] if self.records else 0)

    def close(self) -> None:
        self.journal.close()
        self._lock.release()

    def discard(self) -> None:
        """Close a new run that failed before its first epoch (Ray did not start, too few CPUs for its ranks) and
        take it back, as :meth:`nas.run.store.RunStore.discard` does; one with an epoch, or resumed, is only
        closed. An epoch counts once its checkpoint is on disk: a Ctrl-C (or SIGTERM) between that write and the
        epoch's record in memory took back a trained, journaled epoch."""
        if self._undo is None or self.records or (self.path / CHECKPOINT).exists():
            self.close()
            return
        self.journal.close()
        take_back(self.path, self._undo)
        self._undo = None


def _write_error(path: Path, e: OSError, kept: int | None) -> ValueError:
    """One line for a write to the supernet run in ``path`` that failed, the run keeping its epochs up to ``kept``
    (None: a new run, taken back): a full disk says what is kept and how to go on."""
    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
        return ValueError(f"cannot write to supernet run directory {str(path)!r}: {os_error_text(e)} "
                          f"({e.filename or e})")
    if kept is None:
        return DiskFull(f"{os_error_text(e)} ({path}): the supernet's first epoch could not be written, "
                        "so nothing of the run is kept; free some space, then start it again")
    return DiskFull(f"{os_error_text(e)} ({path}): the run keeps its epochs up to {kept}; free some space, "
                    f"then continue with: nas supernet train --resume --run-dir {path}")


def read_run(path: Path) -> dict[str, Any]:
    """``run.json`` of the supernet run in ``path`` (JSON, read as data); a one-line ValueError when it is none,
    corrupt, a search's, or of another version."""
    cfg = read_run_json(path)
    if cfg.get("kind") != KIND:
        raise ValueError(f"{str(path)!r} is a search run, not a supernet run directory")
    if cfg.get("supernet_format") != FORMAT:
        raise ValueError(f"{str(path)!r} was written by an incompatible version (supernet format "
                         f"{cfg.get('supernet_format')!r}, this version reads {FORMAT})")
    return cfg


def supernet_status(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What ``nas status DIR`` says of the supernet run in ``path`` (None when it holds none): its state (running,
    finished, failed; ``stopped`` when status.json says running but no process holds the lock), epochs done of its
    total, the last epoch's loss and accuracy, as values and as ``text``."""
    from nas.run.lock import held

    path = Path(path)
    try:
        kind = json.loads(read_file(path / RUN_JSON)).get("kind")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    if kind != KIND:
        return None
    cfg, records = read_run(path), read_epochs(path / EPOCHS)
    try:
        status = json.loads(read_file(path / STATUS))
    except (OSError, ValueError, RecursionError):
        status = {}
    state = str(status.get("state", "created"))
    if state in ("created", "running") and not held(path):
        # its process died (also where it had no status.json yet, "created": an epoch writes it after its journal
        # line): --resume continues from the last epoch's checkpoint
        state = "stopped"
    last = records[-1] if records else {}
    st = {"kind": KIND, "run_dir": str(path), "state": state, "epochs_done": last.get("epoch", 0),
          "epochs": cfg.get("epochs"), "train_loss": last.get("train_loss"), "train_acc": last.get("train_acc"),
          "ranks": cfg.get("ranks", 1)}
    figures = "" if not {"train_loss", "train_acc"} <= set(last) else \
        f", last epoch: train loss {last['train_loss']:.4f}, accuracy {last['train_acc']:.4f}"
    from nas.core.terminal import visible  # (the run's text, for a terminal: its control characters shown)

    st["text"] = (f"supernet  {visible(path)}  ({visible(cfg.get('space'))} on {visible(cfg.get('dataset'))}, "
                  f"{visible(cfg.get('sampling'))} sampling, {visible(st['ranks'])} "
                  f"rank{'s' if st['ranks'] != 1 else ''})\n"
                  f"state     {visible(state)}\nepochs    {visible(st['epochs_done'])}/{visible(st['epochs'])}"
                  f"{figures}")
    return st


def _differences(there: dict[str, Any], here: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Each key whose value differs, with both values; within a mapping on both sides (the hyperparameters) each
    of its keys that differs, as ``key.sub``.

    >>> _differences({"seed": 0, "hparams": {"lr": 0.01, "gamma": 0.1}}, {"seed": 0, "hparams": {"lr": 0.5}})
    [('hparams.gamma', 0.1, None), ('hparams.lr', 0.01, 0.5)]
    """
    out = []
    for k in sorted(set(there) | set(here)):
        a, b = there.get(k), here.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [(f"{k}.{sub}", x, y) for sub, x, y in _differences(a, b)]
        elif a != b:
            out.append((k, a, b))
    return out


def _read_checkpoint(path: Path) -> dict[str, Any] | None:
    if not (path / CHECKPOINT).exists():
        return None
    payload = read_snapshot(path / CHECKPOINT)  # JSON + safetensors: a pickle is refused unread
    state, record = payload.get("state"), payload.get("record")
    if payload.get("format") != FORMAT or not isinstance(payload.get("epoch"), int) or not isinstance(state, dict) \
            or state.get("epoch") != payload["epoch"] or not isinstance(record, dict):
        raise ValueError(f"{path / CHECKPOINT} is not a supernet checkpoint of this version")
    return payload


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, default=str).encode()


__all__ = ["SupernetStore", "read_epochs", "read_run", "supernet_status"]

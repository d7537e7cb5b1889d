"""The run directory: everything a search produced, written as it happens.

- ``run.json``      the run's configuration (what ran, with which options and seed)
- ``trials.jsonl``  one line per finished trial (COMPLETE or FAILED), appended and fsynced as it finishes
- ``best.json``     the best architecture so far; ``best.pt`` its trained weights (where the trainer saves)

A line cut short by a crash mid-write is ignored on reading: every line before it is intact; and
opening the journal to append again (a resumed run) first cuts that torn tail off, so the next record
starts on a line of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from nas.types import Result, Trial

FORMAT_VERSION = 1
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # (reading the umask means setting it; put it straight back)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a torn one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the result should read like any new file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @property
    def trials_path(self) -> Path:
        return self.path / "trials.jsonl"

    @property
    def config_path(self) -> Path:
        return self.path / "run.json"

    def create(self, config: dict[str, Any], *, exist_ok: bool = False) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"cannot create run directory {str(self.path)!r}: {e.strerror}") from None
        try:  # a real write, not os.access: root ignores permission bits, read-only mounts do not
            fd, probe = tempfile.mkstemp(dir=self.path, prefix=".write-test.")
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise ValueError(f"run directory {str(self.path)!r} is not writable: {e.strerror}") from None
        if self.trials_path.exists() and not exist_ok:
            raise ValueError(
                f"run directory {str(self.path)!r} already holds a run; pass --resume to continue it "
                "or choose another --run-dir"
            )
        self.write_config(config)

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write(self.config_path, json.dumps({**config, "format": FORMAT_VERSION}, indent=2,
                                                  default=str).encode())

    def config(self) -> dict[str, Any]:
        if not self.config_path.is_file():
            raise ValueError(f"{str(self.path)!r} is not a run directory (no run.json)")
        try:
            cfg = json.loads(self.config_path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.config_path} is corrupt: {e}") from None
        if cfg.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"{str(self.path)!r} was written by an incompatible version (format {cfg.get('format')!r}, "
                f"this version reads {FORMAT_VERSION})"
            )
        return cfg


class Journal:
    """Append-only record of finished trials. ``append`` returns only once the line is on disk."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        cut_torn_tail(run_dir.trials_path)
        self._file = open(run_dir.trials_path, "a", encoding="utf-8")  # noqa: SIM115 (lives with the run)

    def append(self, trial: Trial, result: Result) -> None:
        line = json.dumps({"trial": trial.to_dict(), "result": result.to_dict()}, default=str)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cut_torn_tail(path: Path) -> int:
    r"""Truncate ``path`` after its last newline (a record cut short by a crash); bytes removed.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = p.write_bytes(b'{"a": 1}\n{"b": ')
    >>> cut_torn_tail(p), p.read_bytes()
    (6, b'{"a": 1}\n')
    """
    if not path.is_file():
        return 0
    with open(path, "rb+") as f:
        size = end = f.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            cut = f.read(end - start).rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        if end < size:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
        return size - end


def read_journal(path: str | os.PathLike[str]) -> Iterator[tuple[Trial, Result]]:
    """Every intact record of a run directory's journal, in the order trials finished."""
    trials_path = RunDir(path).trials_path
    if not trials_path.exists():
        RunDir(path).config()  # raises the clearer error when this is no run directory at all
        return
    with open(trials_path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write; all earlier lines are whole
            yield Trial.from_dict(rec["trial"]), Result.from_dict(rec["result"])


COLUMNS = ["trial_id", "arch", "parent", "strategy", "state", "score", "epochs", "member",
           "checkpoint_from", "hparams", "metrics", "error", "start_time", "end_time", "duration",
           "worker", "node", "history"]


def results_frame(records: list[tuple[Trial, Result]] | Iterator[tuple[Trial, Result]],
                  format_arch: Any = None) -> pd.DataFrame:
    """One row per trial, in finishing order. ``arch`` is the space's one-line form when
    ``format_arch`` is given, else canonical JSON; ``metrics`` is the last epoch's metrics, ``history``
    the list of every epoch's metrics (learning curves)."""
    rows = []
    for trial, result in records:
        arch = format_arch(trial.arch) if format_arch else json.dumps(dict(trial.arch), sort_keys=True)
        duration = (result.end_time - result.start_time) if result.start_time and result.end_time else None
        rows.append({
            "trial_id": trial.trial_id, "arch": arch, "parent": trial.parent, "strategy": trial.strategy,
            "state": result.state.value, "score": result.score, "epochs": result.epoch,
            "member": trial.member, "checkpoint_from": trial.checkpoint_from,
            "hparams": dict(trial.hparams), "metrics": result.metrics, "error": result.error,
            "start_time": result.start_time, "end_time": result.end_time, "duration": duration,
            "worker": result.worker, "node": result.node, "history": list(result.history),
        })
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"parent": "Int64", "member": "Int64", "checkpoint_from": "Int64"})

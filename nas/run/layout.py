"""The run directory's layout: the names of the files its owner (:class:`nas.run.store.RunStore`) writes, reading
its ``run.json``, and the rules for making a new one (a new or empty directory; nothing left behind when that
fails, a full disk included).

Layout: ``run.json`` (the :class:`nas.run.config.RunConfig` and the run's identity), ``trials.jsonl``
(:mod:`nas.run.journal`), ``snapshot.json`` (:mod:`nas.run.snapshot`) and its tensor files, ``checkpoints/<id>.pt``,
``best.json`` + ``best.pt`` (:mod:`nas.run.weights`), ``status.json``, ``.lock`` + ``.lock.json``
(:mod:`nas.run.lock`), and a strategy's own state file (``optuna.journal``).

>>> import tempfile
>>> d = Path(tempfile.mkdtemp()); _ = (d / "notes.txt").write_text("mine")
>>> check_empty(d)
Traceback (most recent call last):
...
ValueError: run directory '...' is not empty (it holds notes.txt): a new run needs a new or empty directory, ...
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nas.core.types import Trial
from nas.run.config import RunConfig
from nas.run.files import load_json, os_error_text
from nas.run.journal import DiskFull, Record, bulk_load, latest_results, read_records
from nas.run.lock import HOLDER_FILE, HOLDER_KEYS, LOCK_FILE, RunLock
from nas.run.snapshot import read_snapshot
from nas.run.weights import BEST_JSON, BEST_PT, CHECKPOINTS

RUN_JSON, JOURNAL, SNAPSHOT, STATUS = "run.json", "trials.jsonl", "snapshot.json", "status.json"
SNAPSHOT_FORMAT = 1
#: a supernet run's own files (:mod:`nas.run.supernet_store`; the weights are nas.train.supernet_io.WEIGHTS)
EPOCHS, CHECKPOINT, SUPERNET_WEIGHTS = "epochs.jsonl", "checkpoint.json", "supernet.safetensors"
#: the files a run directory's owner writes (with CHECKPOINTS/, the snapshot's tensor files and a strategy's own
#: state file): nothing else may write over them (:mod:`nas.run.export`)
MANAGED = (RUN_JSON, JOURNAL, SNAPSHOT, STATUS, BEST_JSON, BEST_PT, LOCK_FILE, HOLDER_FILE, "optuna.journal",
           EPOCHS, CHECKPOINT, SUPERNET_WEIGHTS)


def read_run_json(path: Path) -> dict[str, Any]:
    """``run.json`` of the run directory ``path`` as a table (JSON, read as data): a one-line ValueError naming the
    file when it is none or corrupt. What it describes (a search, a supernet) the caller checks."""
    cfg_path = path / RUN_JSON
    if not cfg_path.is_file():
        raise ValueError(f"{str(path)!r} is not a run directory (no run.json)")
    try:
        cfg = load_json(cfg_path.read_bytes())
    except (ValueError, OSError, RecursionError) as e:
        raise ValueError(f"{cfg_path} is corrupt: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{cfg_path} is corrupt: it holds a {type(cfg).__name__}, not a table")
    return cfg


def read_config(path: Path) -> RunConfig:
    """The :class:`nas.run.config.RunConfig` that ``run.json`` of the run directory ``path`` holds (format 2
    converted), type-checked: a one-line ValueError naming the file when it is none, corrupt, of another version,
    or holds a wrongly typed value."""
    cfg_path, cfg = path / RUN_JSON, read_run_json(path)
    if cfg.get("kind") == "supernet":
        raise ValueError(f"{str(path)!r} holds a supernet (nas supernet train), not a search: search its "
                         f"sub-networks with nas search --supernet {path}")
    try:
        return RunConfig.from_json(cfg)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {e}") from None


def first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (what creating it makes), or None."""
    missing = None
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            break
        missing = p
    return missing


def check_empty(path: Path, *, run_ok: bool = False, flag: str = "--run-dir") -> None:
    """A new run's directory must be new or empty (a lock left by a search that never started aside); one that
    holds a run is refused too, unless ``run_ok`` (checked again under the lock, which names a live holder).
    ``flag`` is the option that named it (``nas search``'s ``--run-dir`` can resume a run; others cannot)."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"run directory {str(path)!r} is a file, not a directory; choose another {flag}")
    try:
        names = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    except OSError as e:
        raise ValueError(f"cannot read run directory {str(path)!r}: {os_error_text(e)}") from None
    names = [n for n in names if not _left_lock(path / n) and not left_temporary(n)]
    if JOURNAL in names or RUN_JSON in names:
        if run_ok:
            return
        resume = "pass --resume to continue it or " if flag == "--run-dir" else ""
        raise ValueError(f"run directory {str(path)!r} already holds a run; {resume}choose another {flag}")
    if names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise ValueError(f"run directory {str(path)!r} is not empty (it holds {shown}): a new run needs a new or "
                         f"empty directory, so that none of its files is overwritten; choose another {flag}")


def left_temporary(name: str) -> bool:
    """Whether ``name`` is the temporary file of a write of one of a run's own files (:func:`nas.run.files.atomic_write`
    makes ``.run.json.<8 characters>`` beside it and renames it), which a search killed inside that write left: no
    user's file, and no reason to refuse the folder to a new run (which removes it).

    >>> left_temporary(".run.json.k2x_9q0a"), left_temporary(".run.json.mine"), left_temporary("run.json")
    (True, False, False)
    """
    return any(re.fullmatch(rf"\.{re.escape(managed)}\.[a-z0-9_]{{8}}", name) for managed in MANAGED)


def _left_lock(path: Path) -> bool:
    """Whether ``path`` is a lock file a search left (``.lock``, empty: the OS lock's; ``.lock.json``, the holder
    record a search writes), not a user's file of the same name, which a new run would overwrite."""
    try:
        if path.name == LOCK_FILE:
            return path.is_file() and path.stat().st_size == 0
        if path.name == HOLDER_FILE and path.is_file() and path.stat().st_size < 4096:
            record = json.loads(path.read_bytes())
            return isinstance(record, dict) and set(record) == set(HOLDER_KEYS)
    except (OSError, ValueError, RecursionError):
        return False
    return False


def undo_create(path: Path, lock: RunLock | None, wrote: list[Path], made: Path | None, made_lock: bool) -> None:
    """Take back what a failed :meth:`RunStore.create` made: its files, its lock, the directories it made."""
    for p in reversed(wrote):
        with contextlib.suppress(OSError):
            p.unlink()
    if lock is not None:
        if made_lock:
            with contextlib.suppress(OSError):
                (path / LOCK_FILE).unlink()  # (ours, held: no other search can be waiting on this very file)
        lock.release()
    remove_made(path, made)


def remove_made(path: Path, made: Path | None) -> None:
    """Remove the folders from ``path`` up to ``made`` (what :func:`first_missing` said creating ``path`` would
    make), innermost first, where they are empty; a folder that holds something stays."""
    if made is None:
        return
    for p in (path, *path.parents):
        with contextlib.suppress(OSError):
            p.rmdir()
        if p == made:
            break


def is_tensor_file(name: str) -> bool:
    """Whether ``name`` is a snapshot's (or a supernet checkpoint's) companion safetensors file, which a run
    directory's owner writes beside the JSON (``snapshot.json.<hash>.safetensors``)."""
    return name.endswith(".safetensors") and name.startswith((SNAPSHOT + ".", CHECKPOINT + "."))


def take_back(path: Path, undo: Callable[[], None]) -> None:
    """Take back a new run that holds nothing yet, its files closed: every file of a run in ``path`` (its folder was
    new or empty, so they are its own) but the lock's, then what :func:`new_run` made (``undo``: the lock too)."""
    tensor_files = [p.name for p in path.glob("*.safetensors") if is_tensor_file(p.name)]
    for name in (*MANAGED, *tensor_files):  # (a snapshot's tensors: written before its JSON, which may have failed)
        if name not in (LOCK_FILE, HOLDER_FILE):
            with contextlib.suppress(OSError):
                (path / name).unlink()
    undo()


@contextlib.contextmanager
def new_run(path: Path) -> Iterator[tuple[RunLock, list[Path], Callable[[], None]]]:
    """Make ``path`` a new run's directory, locked, and give the lock, the list of what the caller writes there
    next (the lock's holder file is on it) and a function that takes it all back: it must be new or empty
    (:func:`check_new`, :func:`check_empty` again under the lock), inside no run directory's ``checkpoints/``, and
    writable. When the block raises, what it wrote (the list), the lock and the directories this made are taken
    back, and an OSError becomes one line (:func:`start_error`). On a normal exit the caller keeps the lock, held,
    and the function, for a run that fails before it holds anything (:meth:`nas.run.store.RunStore.discard`)."""
    made = first_missing(path)
    check_new(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create run directory {str(path)!r}: {os_error_text(e)}") from None
    made_lock = not (path / LOCK_FILE).exists()
    lock: RunLock | None = None
    wrote: list[Path] = []
    try:
        probe = write_probe(path)
        if probe is not None:
            raise ValueError(f"run directory {str(path)!r} is not writable: {probe}")
        lock = RunLock(path).acquire()
        check_empty(path)  # (again, under the lock: another run may have started meanwhile)
        for leftover in (p for p in path.iterdir() if left_temporary(p.name)):  # (a killed start's: see above)
            leftover.unlink(missing_ok=True)
        lock.write_holder()
        wrote.append(path / HOLDER_FILE)
        yield lock, wrote, functools.partial(undo_create, path, lock, wrote, made, made_lock)
    except BaseException as e:
        undo_create(path, lock, wrote, made, made_lock)
        if isinstance(e, OSError):
            raise start_error(path, e) from None
        raise


def _check_not_in_checkpoints(path: Path, flag: str = "--run-dir") -> None:
    real = Path(os.path.realpath(path.expanduser()))
    for parent in (real, *real.parents):
        if parent.name == CHECKPOINTS and (parent.parent / RUN_JSON).exists():
            raise ValueError(f"run directory {str(path)!r} is in {str(parent)!r}, the kept checkpoints of the "
                             f"run directory there, which that run owns; choose another {flag}")


def start_error(path: Path, e: OSError) -> ValueError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"{os_error_text(e)} ({path}): the run was not started and nothing was written; "
                        f"free some space and start it again")
    return ValueError(f"cannot start a run in {str(path)!r}: {os_error_text(e)}; nothing was written")


def check_new(path: Path, *, flag: str = "--run-dir") -> None:
    """What a new run's directory must be before its lock is taken: writable where it exists, and new or empty (one
    that holds a run passes here: under the lock, :func:`check_empty` refuses it, or the lock names a live holder),
    and inside no run directory's ``checkpoints/``."""
    _check_not_in_checkpoints(path, flag)
    if path.is_dir() and (probe := write_probe(path)) is not None:
        raise ValueError(f"run directory {str(path)!r} is not writable: {probe}")
    check_empty(path, run_ok=True, flag=flag)


def write_probe(path: Path) -> str | None:
    """Why ``path`` cannot be written (errno's text), or None. A real write, not only os.access: root ignores
    permission bits, read-only mounts and full disks do not."""
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return os_error_text(e)
    return None



def resume_checks(path: Path, prior: RunConfig, config: RunConfig,
                  check_trial: Callable[[Trial], None] | None) -> tuple[list[Record], dict[str, Any] | None]:
    """Every check of a resume, before anything is written: the same search (``config`` against run.json's
    ``prior``), a budget not lowered, a journal read strictly (a second result of a trial not continued: corrupt),
    each trial in the space (``check_trial``, once per trial: its later records hold the same architecture), and
    a snapshot of this version and strategy that covers no more than the journal holds. The journal's records and
    the snapshot."""
    prior.check_resume(config, path)  # another search, or a lower budget: refused
    with bulk_load(freeze=True):
        records = list(read_records(path / JOURNAL))
    latest_results(records, path / JOURNAL)
    if check_trial is not None:
        for rec in records:
            if rec.kind == "submit" and rec.trial.checkpoint_from != rec.trial.trial_id:
                check_trial(rec.trial)
    snapshot = read_snapshot(path / SNAPSHOT) if (path / SNAPSHOT).exists() else None
    if snapshot is not None:
        _check_snapshot(path, snapshot, config, len(records))
    return records, snapshot


def _check_snapshot(path: Path, snapshot: dict[str, Any], config: RunConfig, n_records: int) -> None:
    where = path / SNAPSHOT
    if snapshot.get("format") != SNAPSHOT_FORMAT or not isinstance(snapshot.get("records"), int):
        raise ValueError(f"{where} was written by an incompatible version (format {snapshot.get('format')!r}, "
                         f"this version reads {SNAPSHOT_FORMAT})")
    if snapshot.get("strategy") != config.search.strategy:
        raise ValueError(f"{where} belongs to strategy {snapshot.get('strategy')!r}, not {config.search.strategy!r}")
    if snapshot["records"] > n_records:
        raise ValueError(f"{where} is newer than the journal: it covers {snapshot['records']} journal records, "
                         f"{path / JOURNAL} holds {n_records}; the run directory is inconsistent")


__all__ = ["BEST_JSON", "BEST_PT", "CHECKPOINTS", "JOURNAL", "MANAGED", "RUN_JSON", "SNAPSHOT", "STATUS", "check_empty",
           "check_new", "first_missing", "is_tensor_file", "new_run", "read_config", "read_run_json", "resume_checks",
           "remove_made", "start_error", "take_back", "undo_create", "write_probe"]

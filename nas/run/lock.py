"""One writer per run directory: an OS file lock (``filelock``) on ``RUN/.lock``, held for the driver's life.

The operating system releases the lock when the process dies (SIGKILL included), so a crashed run can be
resumed at once; a second writer fails at once, naming the holder (pid, host, start time), which the
holder writes next to the lock in ``RUN/.lock.json``. Readers (results, best, status, report) take no lock.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> first = RunLock(d).acquire()
>>> first.write_holder()
>>> RunLock(d).acquire()
Traceback (most recent call last):
...
nas.run.lock.InUse: run directory ... is in use by another search (pid ...); wait for it to end or choose another ...
>>> held(d)
True
>>> first.release(); RunLock(d).acquire().release(); held(d)
False
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

import filelock

from nas.run.files import read_file

LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.json"
HOLDER_KEYS = ("pid", "host", "started")  # what .lock.json says of the search that holds the lock


class InUse(ValueError):
    """A run directory another search holds: the holder said as :meth:`RunLock.holder_text` says it, and the option
    that named the folder (``flag``); :func:`nas.oneshot.retrain` says it again naming its own option."""

    def __init__(self, run_dir: Path, holder: str, flag: str = "--run-dir") -> None:
        super().__init__(f"run directory {str(run_dir)!r} is in use by another search ({holder}); wait for it to end "
                         f"or choose another {flag}")
        self.dir, self.holder = run_dir, holder


class RunLock:
    """An exclusive, non-blocking lock on a run directory."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(run_dir)
        self._lock = filelock.FileLock(self.dir / LOCK_FILE, timeout=0, is_singleton=False)

    def acquire(self, flag: str = "--run-dir") -> RunLock:
        """The lock, taken; held by another, a one-line :class:`InUse` naming the holder and ``flag``, the option that
        named the folder (``nas retrain``'s is --out)."""
        try:
            self._lock.acquire(timeout=0)
        except filelock.Timeout:
            raise InUse(self.dir, self.holder_text(), flag) from None
        return self

    def write_holder(self) -> None:
        """Say who holds the lock (called once the writer's checks have passed)."""
        from nas.run.files import atomic_write

        said = (os.getpid(), socket.gethostname(), datetime.datetime.now().isoformat(timespec="seconds"))
        atomic_write(self.dir / HOLDER_FILE, json.dumps(dict(zip(HOLDER_KEYS, said, strict=True))).encode())

    def holder(self) -> dict[str, Any] | None:
        try:
            value = json.loads(read_file(self.dir / HOLDER_FILE))
        except (OSError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def holder_text(self) -> str:
        h = self.holder()
        if h is None:  # (it took the lock and has not written .lock.json yet, which it does once its checks pass)
            return "one that is starting: it has not written its pid yet"
        if h.get("host") == socket.gethostname() and not _alive(h.get("pid")):
            # (a resume still checking, or running its search again: it writes nothing, its pid neither, until then)
            return ("one that is starting or resuming: it has not written its pid yet; .lock.json still names pid "
                    f"{h.get('pid')}, which has ended")
        return f"pid {h.get('pid')} on host {h.get('host')}, started {h.get('started')}"

    @property
    def held(self) -> bool:
        return bool(self._lock.is_locked)

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)


def _alive(pid: object) -> bool:
    """Whether a process ``pid`` runs on this host (a pid that is no positive integer: unknown, taken as alive)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def held(run_dir: str | os.PathLike[str]) -> bool:
    """Whether a search holds the run directory's lock now (its process alive, wherever it runs: the OS drops the
    lock with the process). A read: it takes a shared lock for an instant where none is held, never blocks, and
    writes nothing (a missing lock file: never held)."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO there: no wait)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)

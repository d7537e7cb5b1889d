"""Atomic file replacement for the run directory (readers see the old or the new file, never a torn one), and the
text of an OS error (every message that reports one names errno's text)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # (reading the umask means setting it; put it straight back)


def atomic_write(path: Path, data: bytes) -> int:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename); the bytes written.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "f"
    >>> atomic_write(p, b"abc"), p.read_bytes()
    (3, b'abc')
    """
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
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)  # the rename itself is durable before anything that depends on it is written
    finally:
        os.close(dfd)
    return len(data)


def os_error_text(e: OSError) -> str:
    """What went wrong, in errno's words: ``e.strerror``, else the text of ``e.errno``, else the message itself
    (an OSError raised by a library with no errno), never ``None``.

    >>> import errno
    >>> os_error_text(OSError(errno.ENOSPC, "No space left on device")), os_error_text(OSError(errno.EACCES, None))
    ('No space left on device', 'Permission denied')
    >>> os_error_text(OSError("Cannot save file into a non-existent directory: 'x'"))
    "Cannot save file into a non-existent directory: 'x'"
    """
    if e.strerror:
        return e.strerror
    if isinstance(e.errno, int):
        return os.strerror(e.errno)
    return str(e) or type(e).__name__


def check_regular(path: str | os.PathLike[str]) -> None:
    """A one-line ValueError where ``path`` exists and is no regular file: a folder, or a FIFO, whose open for
    reading waits for a writer forever (every reader of a run hung, and a resume ignored SIGTERM there)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise ValueError(f"{os.fspath(path)} is {kind}, not a regular file: a run directory's files are plain files")


def load_json(raw: bytes | str) -> Any:
    r"""JSON text as values, refusing a lone surrogate escape (``"\ud800"``: valid JSON, but no character, so every
    later encode of it failed naming no file) with a ValueError naming the field where it is.

    >>> load_json('{"a": [1, "x\\ud800"]}')
    Traceback (most recent call last):
    ...
    ValueError: a.1: a lone surrogate escape ('x\ud800'), which is no character
    """
    value = json.loads(raw)
    where = _surrogate(value, "")
    if where is not None:
        raise ValueError(where)
    return value


def _surrogate(value: Any, at: str) -> str | None:
    """Where in ``value`` a string holds a lone surrogate, as ``field: what``; None where none does."""
    stack = [(value, at)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return f"{at or '(the document)'}: a lone surrogate escape ({ascii(v)[:60]}), which is no character"
        elif isinstance(v, dict):
            for k, item in v.items():
                stack.append((k, f"{at}.{ascii(k)[1:-1]}".lstrip(".")))  # (a key too)
                stack.append((item, f"{at}.{ascii(k)[1:-1]}".lstrip(".")))
        elif isinstance(v, list):
            stack.extend((item, f"{at}.{i}".lstrip(".")) for i, item in enumerate(v))
    return None


def read_file(path: str | os.PathLike[str]) -> bytes:
    """``path``'s bytes, where it is a regular file (:func:`check_regular`)."""
    check_regular(path)
    return Path(path).read_bytes()

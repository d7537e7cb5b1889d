"""Files a user names for output (``nas results --csv/--parquet``, ``nas best --export-json/--export-weights``,
``nas report --out``): never one of a run directory's own files, and written atomically.

:func:`owned_by_run` resolves the path as the OS would open it (relative, absolute, ``./``, ``..``, symlinks in any
component, the last one included) and says whether it lands on a file a run directory's owner writes (run.json, the
journal, the snapshot and its tensor files, best.json/best.pt, status.json, the lock's files, a strategy's state
file, anything under checkpoints/, or a temporary file of theirs). :func:`write_export` refuses such a path with one
line, else writes a temporary file beside the target and renames it into place: a failed export (a full disk, a
missing directory) leaves no file, and the line names errno's text.

>>> import tempfile
>>> run = Path(tempfile.mkdtemp()); _ = (run / "run.json").write_text("{}"); _ = (run / "trials.jsonl").write_text("")
>>> owned_by_run(run / "." / "trials.jsonl"), owned_by_run(run / "results.csv")
('trials.jsonl', None)
>>> write_export(run / "trials.jsonl", b"a,b")
Traceback (most recent call last):
...
ValueError: refusing to write '.../trials.jsonl': it is trials.jsonl of the run directory '...', which the run owns; ...
>>> write_export(run / "results.csv", b"a,b"), (run / "results.csv").read_bytes()
(3, b'a,b')
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from nas.run.files import atomic_write, os_error_text
from nas.run.layout import CHECKPOINTS, EPOCHS, JOURNAL, MANAGED, RUN_JSON, is_tensor_file
from nas.run.lock import HOLDER_FILE, LOCK_FILE


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is (or is being made) a run directory: it holds run.json, a journal (a search's or a
    supernet's), or a run's lock with its holder (a ``.lock`` alone is no sign: pytest's folders hold one)."""
    return (any((path / name).exists() for name in (RUN_JSON, JOURNAL, EPOCHS))
            or ((path / LOCK_FILE).exists() and (path / HOLDER_FILE).exists()))


def owned_by_run(path: str | os.PathLike[str]) -> str | None:
    """What a write to ``path`` would overwrite of a run directory (the file's name in it, e.g. ``trials.jsonl`` or
    ``checkpoints/3.pt``), or None when it is no run's file."""
    target = Path(os.path.realpath(Path(path).expanduser()))  # (every symlink followed, the last one too)
    for parent in target.parents:
        if parent.name == CHECKPOINTS and is_run_dir(parent.parent):
            return str(target.relative_to(parent.parent))
    name, parent = target.name, target.parent
    if not is_run_dir(parent):
        return None
    base = name.lstrip(".")
    tensors = is_tensor_file(name)
    temporary = name.startswith(".") and any(base.startswith(m.lstrip(".") + ".") for m in MANAGED)
    if name in MANAGED or tensors or temporary:
        return name  # (a snapshot's tensor files, and the owner's temporary files ".<name>.XXXX")
    return None


def check_export_dir(path: str | os.PathLike[str], what: str = "export into") -> Path:
    """``path`` resolved (symlinks followed), for a user's export directory: a one-line ValueError when it is a run
    directory or lies inside one, whose files the run owns.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp()); _ = (run / "run.json").write_text("{}")
    >>> check_export_dir(run / "front")
    Traceback (most recent call last):
    ...
    ValueError: refusing to export into '.../front': it is inside the run directory '...', which the run owns; ...
    """
    target = Path(os.path.realpath(Path(path).expanduser()))
    for d in (target, *target.parents):
        if is_run_dir(d):
            where = "the run directory" if d == target else "inside the run directory"
            raise ValueError(f"refusing to {what} {str(path)!r}: it is {where} {str(d)!r}, which the run owns; "
                             "choose another directory")
    return target


def check_export_folder(path: str | os.PathLike[str]) -> Path:
    """The user's folder ``path`` to write into (as given, ``~`` expanded): refused in one line where it is a run
    directory or inside one (:func:`check_export_dir`), or a file."""
    check_export_dir(path, "write into")
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"cannot write into {str(path)!r}: it is a file; name a folder")
    return folder


def make_export_dir(path: str | os.PathLike[str]) -> Path:
    """The user's export folder ``path`` (:func:`check_export_folder`), made where it is missing (its parents too); one
    that cannot be made is refused with errno's text."""
    folder = check_export_folder(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot make the folder {str(path)!r}: {os_error_text(e)}") from None
    return folder


def check_not_owned(path: str | os.PathLike[str]) -> None:
    """A one-line ValueError when a write to ``path`` would land on a run directory's own file (:func:`owned_by_run`),
    naming the file and the run directory."""
    owned = owned_by_run(path)
    if owned is not None:
        run = Path(os.path.realpath(Path(path).expanduser()))
        for _ in Path(owned).parts:  # (checkpoints/new/x.csv: three folders up)
            run = run.parent
        raise ValueError(f"refusing to write {str(path)!r}: it is {owned} of the run directory {str(run)!r}, which "
                         "the run owns; choose another path")


def _file_to_write(path: str | os.PathLike[str]) -> tuple[str, Path, Path]:
    """``path`` as shown, as given (``/dev/stdout`` resolves to a pipe's name that cannot be opened) and resolved,
    once it is checked to name a file that is no run directory's own: a one-line ValueError otherwise."""
    shown = str(path)
    check_not_owned(path)
    given = Path(path).expanduser()
    target = Path(os.path.realpath(given))
    if target.is_dir() or shown.endswith(("/", os.sep)) or not shown.strip():
        what = "is a directory" if target.is_dir() else "names a directory (it ends in a slash)" if shown.strip() \
            else "is an empty path"
        raise ValueError(f"cannot write {shown!r}: it {what}; name a file")
    return shown, given, target


def check_export_file(path: str | os.PathLike[str]) -> None:
    """A one-line ValueError where a later :func:`write_export` to ``path`` cannot succeed, said before the work
    whose output it is (a benchmark ran for minutes, then lost its figures to ``--json /dev/full``): a run
    directory's own file, a directory, a missing or unwritable folder, a device that refuses writes (probed with a
    write of no bytes; a FIFO is left alone, as its reader may come later)."""
    shown, given, target = _file_to_write(path)
    try:
        if given.exists() and not given.is_file():
            if stat.S_ISCHR(given.stat().st_mode):
                fd = os.open(given, os.O_WRONLY | os.O_NONBLOCK)
                try:
                    os.write(fd, b"")
                finally:
                    os.close(fd)
            elif not os.access(given, os.W_OK):
                raise PermissionError(13, "Permission denied")
            return
    except OSError as e:
        raise ValueError(f"cannot write {shown!r}: {os_error_text(e)}") from None
    if not target.parent.is_dir():
        raise ValueError(f"cannot write {shown!r}: there is no folder {str(target.parent)!r}")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {shown!r}: no file can be made in {str(target.parent)!r} (permission denied)")


def write_export(path: str | os.PathLike[str], data: bytes) -> int:
    """Write ``data`` to ``path`` (atomically: a temporary file beside it, then a rename) unless it is a run
    directory's own file; the bytes written. A ValueError of one line otherwise. Where ``path`` is a device or a
    pipe (``/dev/null``, ``/dev/stdout``, a FIFO), into it as it is: a rename would put a plain file in its place."""
    shown, given, target = _file_to_write(path)
    try:
        mode = os.stat(given).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:  # (a loop of symbolic links: the rename replaced the link with a file)
        raise ValueError(f"cannot write {shown!r}: {os_error_text(e)}") from None
    if mode is not None and not stat.S_ISREG(mode):
        try:
            fd = os.open(given, os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(mode) else 0))
        except OSError as e:  # (a pipe no process reads: ENXIO, where a plain open waited forever)
            why = "it is a pipe that no process reads" if e.errno == errno.ENXIO else os_error_text(e)
            raise ValueError(f"cannot write {shown!r}: {why}") from None
        try:
            os.set_blocking(fd, True)
            with open(fd, "wb") as f:
                f.write(data)
        except OSError as e:
            raise ValueError(f"cannot write {shown!r}: {os_error_text(e)}") from None
        return len(data)
    try:
        return atomic_write(target, data)
    except OSError as e:
        if e.filename2 is None and e.filename and Path(e.filename).parent == target.parent:  # (the temp file)
            raise ValueError(f"cannot write {shown!r}: no file can be made in {str(target.parent)!r} "
                             f"({os_error_text(e)})") from None
        raise ValueError(f"cannot write {shown!r}: {os_error_text(e)}") from None


__all__ = ["check_export_dir", "check_export_file", "check_export_folder", "check_not_owned", "is_run_dir",
           "make_export_dir", "owned_by_run", "write_export"]

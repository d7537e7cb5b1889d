"""The write-ahead journal ``trials.jsonl``: one JSON record per line, each with a ``kind``.

- ``{"kind": "submit", "trial": {...}}`` when a trial is handed to an executor;
- ``{"kind": "result", "trial": {...}, "result": {...}}`` when it ended (its ``outcome``: COMPLETE, STOPPED,
  PAUSED or FAILED with its ``failure`` kind; a journal of format 2 has ``state`` and ``reason`` instead, read as
  :func:`nas.core.types.legacy_outcome` says);
- further kinds (e.g. ``"report"``: an intermediate result per epoch) may be added: readers keep the
  records of kinds they know and check the shape of each.

Results are written and fsynced before the strategy hears of them; several results that arrive together
share one fsync (:meth:`JournalWriter.write_results`). Submissions are written without their own fsync:
the next result's fsync covers them, and a snapshot is never newer than what is synced.

Reading never drops a record silently: a line that is not a record of a known shape, in the middle of the
file, is a ValueError naming the file and line; only a torn LAST line (a crash mid-write) is ignored,
and cut off when the journal is opened to append again.

>>> import tempfile
>>> from nas.core.types import FailureKind, Outcome, Report, Result, Trial
>>> p = Path(tempfile.mkdtemp()) / "trials.jsonl"
>>> w = JournalWriter(p)
>>> t = Trial(0, {"a": 1})
>>> w.write_submit(t); _ = w.write_results([(t, Result(0, Outcome.COMPLETE, score=0.5))]); w.close()
>>> [r.kind for r in read_records(p)]
['submit', 'result']
>>> _ = p.write_text(p.read_text() + "oops\\n" + p.read_text())
>>> list(read_records(p))
Traceback (most recent call last):
...
ValueError: .../trials.jsonl line 3 is not a journal record (not JSON); the journal is corrupt
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from nas.core.types import FailureKind, Outcome, Report, Result, Trial

KINDS = ("submit", "result", "report")
Opener = Callable[[Path], IO[bytes]]


class DiskFull(ValueError):
    """The run directory's disk is full: what is on disk is intact; free space, then resume."""


class Record(NamedTuple):
    kind: str
    trial: Trial
    result: Result | None  # for kind "result"
    line: int  # 1-based line number in the file
    report: Report | None = None  # for kind "report"


def _open_append(path: Path) -> IO[bytes]:
    return open(path, "ab")  # noqa: SIM115 (lives with the run)


class JournalWriter:
    """Appends records to ``path``. ``opener`` opens the file for appending (binary); it is injectable so
    a test can hand in a file whose writes fail (a full disk) without touching this class's insides."""

    def __init__(self, path: Path, *, opener: Opener = _open_append) -> None:
        self.path = Path(path)
        cut_torn_tail(self.path)
        self._file = opener(self.path)
        self.fsync_seconds = 0.0  # time spent in fsync, for the driver benchmark
        self.fsyncs = 0

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
        except OSError as e:
            raise self._error(e) from None

    def _error(self, e: OSError) -> Exception:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFull(f"no space left on the device of {self.path.parent}: {self.path.name} holds every "
                            f"finished trial up to its last whole line; free some space, then resume with: "
                            f"nas search --resume {self.path.parent}")
        return e

    def write_submit(self, trial: Trial) -> None:
        self._write(_line({"kind": "submit", "trial": _trial(trial)}))

    def write_report(self, trial: Trial, report: Report) -> None:
        """An intermediate result (one epoch); synced with the next result."""
        self._write(_line({"kind": "report", "trial": _trial(trial), "report": report.to_dict()}))

    def flush(self) -> None:
        """Hand what was written to the OS (it survives the driver's crash; an fsync makes it survive the
        machine's)."""
        try:
            self._file.flush()
        except OSError as e:
            raise self._error(e) from None

    def write_results(self, batch: Iterable[tuple[Trial, Result]]) -> int:
        """Append every result of ``batch`` and make them durable with one fsync; records written."""
        data = b"".join(_line({"kind": "result", "trial": _trial(t), "result": _result(r)}) for t, r in batch)
        if data:
            self._write(data)
            self.sync()
        return data.count(b"\n")

    def sync(self) -> None:
        """Flush and fsync what was written (no-op when nothing was)."""
        t0 = time.perf_counter()
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            raise self._error(e) from None
        self.fsync_seconds += time.perf_counter() - t0
        self.fsyncs += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):  # (a full disk: the error was raised where it happened)
            self._file.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_TRIAL_FIELDS = tuple(f.name for f in dataclasses.fields(Trial))
_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(Result))
_TRIAL_NAMES, _RESULT_NAMES = frozenset(_TRIAL_FIELDS), frozenset(_RESULT_FIELDS)


def _trial(t: Trial) -> dict[str, Any]:
    """``t.to_dict()`` without ``dataclasses.asdict``'s deep copy (serialized at once; 5x cheaper)."""
    d = {k: getattr(t, k) for k in _TRIAL_FIELDS}
    d["arch"], d["hparams"] = dict(t.arch), dict(t.hparams)
    return d


def _result(r: Result) -> dict[str, Any]:
    d = {k: getattr(r, k) for k in _RESULT_FIELDS}  # (StrEnum values serialize as their strings)
    return d


try:  # orjson (maintained, ~5x faster both ways) where installed; the json module otherwise, same format
    import orjson

    def _line(rec: dict[str, Any]) -> bytes:
        return orjson.dumps(rec, default=str, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover
    def _line(rec: dict[str, Any]) -> bytes:
        return (json.dumps(rec, default=str, separators=(",", ":")) + "\n").encode()

    _loads = json.loads


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


_OUTCOMES = {o.value: o for o in Outcome}
_FAILURES: dict[Any, FailureKind | None] = {None: None, **{f.value: f for f in FailureKind}}


def _parse(path: Path, number: int, line: bytes) -> Record:
    try:
        rec = _loads(line)
    except ValueError:
        raise ValueError(f"{path} line {number} is not a journal record (not JSON); the journal is corrupt") from None
    kind: Any = rec.get("kind") if type(rec) is dict else None
    trial_d = rec.get("trial") if kind in KINDS else None
    if type(trial_d) is not dict:
        raise ValueError(f"{path} line {number} is not a journal record (expected an object with kind one of "
                         f"{list(KINDS)} and a trial); the journal is corrupt")
    try:  # (the fast path: a dict of known keys goes straight in; only an older or newer record is filtered)
        trial = Trial(**trial_d) if trial_d.keys() <= _TRIAL_NAMES else Trial(
            **{k: v for k, v in trial_d.items() if k in _TRIAL_NAMES})
        if type(trial.trial_id) is not int:
            raise TypeError(f"trial_id {trial.trial_id!r} is not an integer")
        result = report = None
        if kind == "report":
            report = _report(rec)
            if report.trial_id != trial.trial_id:
                raise ValueError(f"report of trial {report.trial_id} filed under trial {trial.trial_id}")
        elif kind == "result":
            kw = rec["result"]
            if "outcome" not in kw:  # a record of format 2 (state + reason strings)
                result = Result.from_dict(kw)
            else:
                if kw.keys() - _RESULT_NAMES:
                    kw = {k: v for k, v in kw.items() if k in _RESULT_NAMES}
                kw["outcome"], kw["failure"] = _OUTCOMES[kw["outcome"]], _FAILURES[kw.get("failure")]
                result = Result(**kw)
            if result.trial_id != trial.trial_id:
                raise ValueError(f"result of trial {result.trial_id} filed under trial {trial.trial_id}")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path} line {number} is a {kind} record of the wrong shape ({type(e).__name__}: {e}); "
                         "the journal is corrupt") from None
    return Record(str(kind), trial, result, number, report)


def _report(rec: dict[str, Any]) -> Report:
    """A report record's :class:`Report` (format 2 journaled it as a RUNNING result, its epoch in the metrics)."""
    if "report" in rec:
        return Report(**rec["report"])
    old = rec["result"]
    metrics = {k: v for k, v in old.get("metrics", {}).items() if k != "epoch"}
    return Report(old["trial_id"], int(old["epoch"]), metrics, old.get("score"), old.get("end_time"),
                  old.get("worker"))


def read_records(path: Path) -> Iterator[Record]:
    """Every record of the journal at ``path`` in order; a torn last line (no newline) is ignored."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                return  # torn by a crash mid-write: every earlier line is whole
            yield _parse(path, number, line)


@contextlib.contextmanager
def bulk_load(*, freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while a whole journal is read (records hold no cycles; the collector's
    passes over 100,000s of new objects would otherwise cost more than the parsing). With ``freeze`` (a
    long-lived driver resuming a run), what is alive at the end is moved out of the collector's sight
    (:func:`gc.freeze`), so that its first passes after do not scan every record once more (0.4-0.8 s at
    100,000 trials); acyclic objects are still freed by reference counting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def latest_results(records: Iterable[Record], path: Path) -> dict[int, tuple[Trial, Result]]:
    """Each finished trial's latest (trial, result), in the order trials first finished. A trial continued
    after a pause (a ``submit`` of it again with ``checkpoint_from`` its own id: an ASHA promotion) may
    finish again; any other second result of a trial id is a ValueError (the journal is corrupt)."""
    latest: dict[int, tuple[Trial, Result]] = {}
    first_line: dict[int, int] = {}
    continued: set[int] = set()
    for rec in records:
        tid = rec.trial.trial_id
        if rec.kind == "submit" and tid in latest and rec.trial.checkpoint_from == tid:
            continued.add(tid)
        if rec.kind != "result":
            continue
        assert rec.result is not None
        if tid in latest and tid not in continued:
            raise ValueError(f"{path} line {rec.line} holds a second result for trial {tid} "
                             f"(the first is on line {first_line[tid]}); the journal is corrupt")
        continued.discard(tid)
        first_line.setdefault(tid, rec.line)
        latest[tid] = (latest[tid][0] if tid in latest else rec.trial, rec.result)
    return latest


def read_results(path: Path) -> Iterator[tuple[Trial, Result]]:
    """The finished trials of the journal at ``path`` (see :func:`latest_results`)."""
    yield from latest_results(read_records(path), path).values()

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

Reading never drops a record silently: each line is checked against its kind's schema as it is read
(:mod:`nas.run.schema`), and a line that does not fit, in the middle of the file, is a ValueError naming the file,
the line and the field; only a torn LAST line (a crash mid-write) is ignored, and cut off when the journal is
opened to append again.

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
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from shlex import quote
from typing import IO, Any, NamedTuple

import msgspec

from nas.core.types import Report, Result, Trial, legacy_outcome
from nas.run.files import check_regular, os_error_text
from nas.run.schema import JOURNAL_DECODER, Finished, Reported, Submit, explain

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

    def __init__(self, path: Path, *, opener: Opener = _open_append, continue_with: str | None = None) -> None:
        self.path = Path(path)
        self.continue_with = continue_with or f"resume with: nas search --resume {quote(str(self.path.parent))}"
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
            return DiskFull(f"{os_error_text(e)} ({self.path.parent}): {self.path.name} holds every "
                            f"finished trial up to its last whole line; free some space, then {self.continue_with}")
        return e

    def write_submit(self, trial: Trial) -> None:
        self._write(record_line("submit", trial))

    def write_report(self, trial: Trial, report: Report) -> None:
        """An intermediate result (one epoch); synced with the next result."""
        self._write(record_line("report", trial, report))

    def flush(self) -> None:
        """Hand what was written to the OS (it survives the driver's crash; an fsync makes it survive the
        machine's)."""
        try:
            self._file.flush()
        except OSError as e:
            raise self._error(e) from None

    def write_results(self, batch: Iterable[tuple[Trial, Result]]) -> int:
        """Append every result of ``batch`` and make them durable with one fsync; records written."""
        data = b"".join(record_line("result", t, r) for t, r in batch)
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


def record_line(kind: str, trial: Trial, payload: Result | Report | None = None) -> bytes:
    """The journal's line for a record: ``kind`` submit (no payload), report (a :class:`Report`) or result (a
    :class:`Result`). A record read back (:class:`Record`) gives the same bytes: what a re-run compares."""
    rec: dict[str, Any] = {"kind": kind, "trial": _trial(trial)}
    if isinstance(payload, Report):
        rec["report"] = payload.to_dict()
    elif payload is not None:
        rec["result"] = _result(payload)
    return _line(rec)


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
    if not path.is_file():  # (a FIFO or a folder too: its readers refuse it, nothing is cut)
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


def _parse(path: Path, number: int, line: bytes) -> Record:
    """One journal line as a :class:`Record`, checked against its kind's schema (:mod:`nas.run.schema`) in one
    pass; a record of format 2 (results with ``state`` and ``reason``, reports as results) is converted first."""
    try:
        rec = JOURNAL_DECODER.decode(line)
    except msgspec.ValidationError as e:  # (a DecodeError too: first)
        rec = _legacy(path, number, line, e)
    except msgspec.DecodeError:
        raise ValueError(f"{path} line {number} is not a journal record (not JSON); the journal is corrupt") from None
    except RecursionError:  # (msgspec's, and json's, on arrays nested a thousand deep)
        raise ValueError(f"{path} line {number} is not a journal record (nested too deeply); the journal is "
                         "corrupt") from None
    try:
        t = rec.trial
        trial = Trial(t.trial_id, t.arch, t.hparams, t.epochs, t.parent, t.checkpoint_from, t.save_checkpoint,
                      t.member, t.strategy, t.inherit_from)
        if type(rec) is Submit:
            return Record("submit", trial, None, number)
        if type(rec) is Reported:
            p = rec.report
            if p.trial_id != t.trial_id:
                raise ValueError(f"report.trial_id: a report of trial {p.trial_id} filed under trial {t.trial_id}")
            _check_measured(p.metrics, "report.metrics")
            return Record("report", trial, None, number, Report(p.trial_id, p.epoch, p.metrics, p.score, p.time,
                                                                p.worker))
        r = rec.result
        if r.trial_id != t.trial_id:
            raise ValueError(f"result.trial_id: a result of trial {r.trial_id} filed under trial {t.trial_id}")
        _check_measured(r.metrics, "result.metrics")
        if r.start_time is not None and r.end_time is not None and not math.isfinite(r.end_time - r.start_time):
            raise ValueError(f"result.end_time: {r.end_time!r} and start_time {r.start_time!r} are no times a "
                             f"duration can be taken of")  # (a clock stepped back by NTP is taken as it is)
        result = Result(r.trial_id, r.outcome, r.score, r.metrics, r.history, r.epoch, r.error, r.start_time,  # type: ignore[arg-type]
                        r.end_time, r.worker, r.node, r.scores, r.failure)  # (a NaN score was journaled as null)
        if result.ok and result.score is None:  # (a NaN or missing objective fails its trial: never journaled so)
            raise ValueError(f"result.score: a {r.outcome.value} result carries a score, got null")
        return Record("result", trial, result, number)
    except ValueError as e:
        raise ValueError(f"{path} line {number} is a {_kind(rec)} record of the wrong shape ({e}); the journal is "
                         "corrupt") from None


def _kind(rec: Submit | Reported | Finished) -> str:
    return "submit" if type(rec) is Submit else "report" if type(rec) is Reported else "result"


#: metrics the trainer measures as numbers (None where it could not): the tables and the report format them so
MEASURED = ("params", "flops", "latency_ms", "latency_batch_ms", "peak_memory_mb", "train_seconds",
            "samples_per_second", "epochs_trained", "batch_size", "threads")


def _check_measured(metrics: dict[str, Any], where: str) -> None:
    for key in MEASURED:
        value = metrics.get(key)
        if value is not None and (type(value) is bool or not isinstance(value, int | float)):
            raise ValueError(f"{where}.{key}: expected a number or null, got {type(value).__name__}")


def _legacy(path: Path, number: int, line: bytes, error: msgspec.ValidationError) -> Submit | Reported | Finished:
    """A record that does not fit today's schema: converted when it is of format 2, else the one-line error
    naming its field."""
    try:
        rec = _loads(line)
    except (ValueError, RecursionError):  # JSON only the schema's parser reads (a number out of range): its word
        raise ValueError(f"{path} line {number} is a journal record of the wrong shape ({explain(error)}); the "
                         "journal is corrupt") from None
    kind = rec.get("kind") if type(rec) is dict else None
    if kind not in KINDS or type(rec.get("trial")) is not dict:
        raise ValueError(f"{path} line {number} is not a journal record (expected an object with kind one of "
                         f"{list(KINDS)} and a trial); the journal is corrupt") from None
    old = rec.get("result")
    try:
        if kind == "result" and type(old) is dict and "outcome" not in old:  # format 2: state and reason
            outcome, failure = legacy_outcome(old.get("state"), old.get("reason"), old.get("error"))
            rec = {**rec, "result": {**old, "outcome": outcome.value, "failure": failure}}
        elif kind == "report" and "report" not in rec and type(old) is dict:  # format 2: a RUNNING result
            metrics = old.get("metrics")
            metrics = {k: v for k, v in metrics.items() if k != "epoch"} if type(metrics) is dict else metrics
            rec = {**rec, "report": {"trial_id": old.get("trial_id"), "epoch": old.get("epoch"), "metrics": metrics,
                                     "score": old.get("score"), "time": old.get("end_time"),
                                     "worker": old.get("worker")}}
        else:
            raise ValueError(explain(error))
        return msgspec.convert(rec, Submit | Reported | Finished, strict=True)  # type: ignore[arg-type]
    except msgspec.ValidationError as e:
        why = explain(e)
    except ValueError as e:
        why = str(e)
    raise ValueError(f"{path} line {number} is a {kind} record of the wrong shape ({why}); the journal is "
                     "corrupt") from None


def read_records(path: Path) -> Iterator[Record]:
    """Every record of the journal at ``path`` in order; a torn last line (no newline) is ignored."""
    if not path.exists():
        return
    check_regular(path)
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
    latest = _Latest(path)
    for rec in records:
        latest.add(rec)
    return latest.results


class _Latest:
    """:func:`latest_results`, a record at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.results: dict[int, tuple[Trial, Result]] = {}
        self.first_line: dict[int, int] = {}
        self.continued: set[int] = set()
        self.unfinished: set[int] = set()  # submitted, with no result after: running or queued (or lost with a crash)

    def add(self, rec: Record) -> None:
        tid = rec.trial.trial_id
        if rec.kind == "submit":
            self.unfinished.add(tid)
            if tid in self.results and rec.trial.checkpoint_from == tid:
                self.continued.add(tid)
        if rec.kind != "result":
            return
        self.unfinished.discard(tid)
        assert rec.result is not None
        if tid in self.results and tid not in self.continued:
            raise ValueError(f"{self.path} line {rec.line} holds a second result for trial {tid} "
                             f"(the first is on line {self.first_line[tid]}); the journal is corrupt")
        self.continued.discard(tid)
        self.first_line.setdefault(tid, rec.line)
        self.results[tid] = (self.results[tid][0] if tid in self.results else rec.trial, rec.result)


class ResultsTail:
    """The finished trials of the journal at ``path``, each with its first trial and its latest result in the order
    they first finished (as :func:`latest_results`, checked as it checks them), read on from where the last
    :meth:`read` ended: a view of a search that goes on (``nas status --watch``) parses each line once, checked
    against its schema as every reader does; a journal that is another file now, or shorter than what was read, is
    read again from its start.

    >>> import tempfile
    >>> from nas.core.types import Outcome, Result, Trial
    >>> p = Path(tempfile.mkdtemp()) / "trials.jsonl"
    >>> tail, w = ResultsTail(p), JournalWriter(p)
    >>> tail.read()
    {}
    >>> t = Trial(0, {"a": 1}); w.write_submit(t); _ = w.write_results([(t, Result(0, Outcome.COMPLETE, score=0.5))])
    >>> [(tid, r.score) for tid, (_, r) in tail.read().items()], tail.lines
    ([(0, 0.5)], 2)
    >>> _ = w.write_results([(Trial(1, {"a": 2}), Result(1, Outcome.COMPLETE, score=0.7))]); w.close()
    >>> [(tid, r.score) for tid, (_, r) in tail.read().items()], tail.lines
    ([(0, 0.5), (1, 0.7)], 3)
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = self.lines = 0  # bytes and whole lines read so far
        self._latest = _Latest(self.path)
        self._file: tuple[int, int] | None = None  # (device, inode) of the file read

    def read(self) -> dict[int, tuple[Trial, Result]]:
        """The finished trials, with what was appended since the last call read (a torn last line is left for the
        next call)."""
        if not self.path.exists():
            return self._latest.results
        check_regular(self.path)
        with open(self.path, "rb") as f, bulk_load():
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != self._file or st.st_size < self.offset:
                self.offset = self.lines = 0
                self._latest = _Latest(self.path)
                self._file = (st.st_dev, st.st_ino)
            f.seek(self.offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # (torn by a crash, or still being written)
                self.lines += 1
                self.offset += len(line)
                self._latest.add(_parse(self.path, self.lines, line))
        return self._latest.results

    @property
    def unfinished(self) -> int:
        """Trials the journal submitted and holds no result of since (as of the last :meth:`read`)."""
        return len(self._latest.unfinished)


def read_results(path: Path) -> Iterator[tuple[Trial, Result]]:
    """The finished trials of the journal at ``path`` (see :func:`latest_results`)."""
    yield from latest_results(read_records(path), path).values()

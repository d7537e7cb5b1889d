"""One schema per kind of record a run directory holds, checked once as it is read: the journal's ``submit``,
``report`` and ``result`` records (:mod:`nas.run.journal`) and ``status.json`` (:func:`read_status`).

The schemas are `msgspec <https://jcristharif.com/msgspec/>`_ structs (a maintained library that parses JSON
straight into typed values in one C pass): a wrong type, a missing field or a number out of range is a
:class:`SchemaError` whose one line names the file, the line and the field, e.g. ``trials.jsonl line 7: trial.arch:
Expected `object`, got `array```. Fields a newer version adds are ignored; integers are 64-bit.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> _ = (d / "status.json").write_text('{"state": "running", "pid": -1, "host": "h", "updated": 1.0}')
>>> read_status(d)
Traceback (most recent call last):
...
nas.run.schema.SchemaError: .../status.json: pid: Expected `int` >= 1
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import msgspec

from nas.core.types import FailureKind, Outcome
from nas.run.files import os_error_text, read_file

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Pid = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
#: a duration: not negative, and less than 30,000 years (1e308 printed 300 digits; its ratios were inf)
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=1e12)]


class SchemaError(ValueError):
    """A record of a run directory that does not fit its schema (one line: file, line, field, what is wrong)."""


class TrialRecord(msgspec.Struct):
    """A trial as journaled (:class:`nas.core.types.Trial`)."""

    trial_id: Int64
    arch: dict[str, Any]
    hparams: dict[str, Any] = {}
    epochs: Count | None = None
    parent: Int64 | None = None
    checkpoint_from: Int64 | None = None
    save_checkpoint: bool = False
    member: Int64 | None = None
    strategy: str = ""
    inherit_from: Int64 | None = None


class ResultRecord(msgspec.Struct):
    """A result as journaled (:class:`nas.core.types.Result`); a NaN is journaled as null."""

    trial_id: Int64
    outcome: Outcome
    score: float | None = None
    metrics: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    epoch: Count = 0
    error: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    worker: str | None = None
    node: str | None = None
    scores: list[float | None] | None = None
    failure: FailureKind | None = None


class ReportRecord(msgspec.Struct):
    """An intermediate result as journaled (:class:`nas.core.types.Report`)."""

    trial_id: Int64
    epoch: Count
    metrics: dict[str, Any] = {}
    score: float | None = None
    time: float | None = None
    worker: str | None = None


class Submit(msgspec.Struct, tag_field="kind", tag="submit"):  # type: ignore[call-arg]
    trial: TrialRecord


class Reported(msgspec.Struct, tag_field="kind", tag="report"):  # type: ignore[call-arg]
    trial: TrialRecord
    report: ReportRecord


class Finished(msgspec.Struct, tag_field="kind", tag="result"):  # type: ignore[call-arg]
    trial: TrialRecord
    result: ResultRecord


JOURNAL_DECODER = msgspec.json.Decoder(Submit | Reported | Finished)


class Status(msgspec.Struct):
    """``status.json``: what the live loop knows (:class:`nas.engine.interfaces.LoopStatus`), who writes it and when.
    ``state``, ``pid``, ``host`` and ``updated`` are required; the counts default to 0 (a file of an older
    version)."""

    state: str
    pid: Pid
    host: str
    updated: float
    started: float | None = None
    strategy: str = ""
    finished: Count = 0
    complete: Count = 0
    failed: Count = 0
    running: Count = 0
    queued: Count = 0
    workers: Count | None = None
    budget: Count | None = None
    time_budget: Seconds | None = None
    elapsed: Seconds = 0.0
    busy_seconds: Seconds = 0.0
    best_score: float | None = None
    best_trial: Int64 | None = None
    population: Count = 0
    strategy_seconds: Seconds = 0.0
    reports: Count = 0
    report_seconds: Seconds = 0.0
    decisions: dict[str, Count] = {}
    resumed: Count = 0
    utilization: Seconds | None = None  # (a ratio: bounded as the durations it is of)


STATUS_DECODER = msgspec.json.Decoder(Status)


def explain(e: msgspec.MsgspecError) -> str:
    """msgspec's message as ``field: what`` (the field as a dotted path), e.g. ``trial.arch: Expected `object`...``.

    >>> try:
    ...     JOURNAL_DECODER.decode(b'{"kind": "submit", "trial": {"trial_id": "7", "arch": {}}}')
    ... except msgspec.ValidationError as e:
    ...     print(explain(e))
    trial.trial_id: Expected `int`, got `str`
    """
    text = str(e)
    what, sep, where = text.rpartition(" - at `$")
    if not sep:
        return text
    return f"{where.rstrip('`').lstrip('.') or '(the record)'}: {what}"


def read_status(run_dir: str | os.PathLike[str]) -> Status | None:
    """``status.json`` of ``run_dir`` checked against :class:`Status`: None when there is none, a
    :class:`SchemaError` naming the file and field when it does not fit."""
    path = Path(run_dir) / "status.json"
    try:
        raw = read_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SchemaError(f"cannot read {path}: {os_error_text(e)}") from None
    try:
        return STATUS_DECODER.decode(raw)
    except msgspec.ValidationError as e:  # (a DecodeError too: first)
        raise SchemaError(f"{path}: {explain(e)}") from None
    except msgspec.DecodeError as e:
        raise SchemaError(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise SchemaError(f"{path}: not a status (nested too deeply)") from None


__all__ = ["JOURNAL_DECODER", "Finished", "ReportRecord", "Reported", "ResultRecord", "SchemaError", "Status",
           "Submit", "TrialRecord", "explain", "read_status"]

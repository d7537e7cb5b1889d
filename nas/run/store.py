"""The owner of a run directory: its layout, every write to it, and the lock. (Reading is
:mod:`nas.run.reader`.) The search loop calls it at a few named points and writes no files itself:

- :meth:`RunStore.on_submit` (a trial handed to an executor: a journal record, synced with the next result)
- :meth:`RunStore.keep_checkpoint` (a checkpoint later trials start from, written before its result)
- :meth:`RunStore.on_results` (a batch of results: journaled with one fsync, before the strategy hears)
- :meth:`RunStore.on_best` (best.pt, then best.json naming the same trial and the weights' hash)
- :meth:`RunStore.snapshot_due` / :meth:`RunStore.snapshot` (the loop's :class:`nas.engine.loop.SnapshotState`
  every K results or T seconds, atomically)
- :meth:`RunStore.write_status` (the loop's :class:`nas.engine.loop.LoopStatus` to status.json) and
  :meth:`RunStore.finish`.

The store takes values; it never holds the loop. The files it writes are named in :mod:`nas.run.layout`.

Each call's cost is O(1) in workers and trials (the snapshot's cost is that of the strategy's state,
and snapshots are spaced so that they take at most ~5% of the driver's time).
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import inspect
import json
import os
import socket
import time
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING, Any

from nas.core.types import Report, Result, Trial
from nas.engine.replay import Restored
from nas.run.config import RunConfig
from nas.run.files import atomic_write, os_error_text
from nas.run.journal import DiskFull, JournalWriter, Opener
from nas.run.layout import (
    JOURNAL,
    MANAGED,
    RUN_JSON,
    SNAPSHOT,
    SNAPSHOT_FORMAT,
    STATUS,
    new_run,
    read_config,
    resume_checks,
    take_back,
)
from nas.run.lock import RunLock
from nas.run.snapshot import write_snapshot
from nas.run.weights import (
    BEST_JSON,
    BEST_PT,
    CHECKPOINTS,
    best_checkpoint,
    best_weights,
    check_checkpoint,
    read_checkpoint,
    read_json,
    weights_match,
)
from nas.strategies.fixed import FixedArchs

if TYPE_CHECKING:
    from nas.engine.interfaces import LoopStatus, SnapshotState


def check_store_options(options: Mapping[str, Any]) -> None:
    """A one-line error, before anything is made, for a :class:`RunStore` option it does not take or a value it cannot
    use (``snapshot_every='x'`` was a TypeError comparing int and str at the first result; an unknown name
    ``__init__``'s "unexpected keyword argument")."""
    params = inspect.signature(RunStore.__init__).parameters.values()  # (its keywords: one list, not two)
    allowed = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "strategy"]
    unknown = sorted(str(k) for k in options if k not in allowed)
    if unknown:
        raise ValueError(f"unknown run options {unknown}; allowed: {', '.join(allowed)}")
    for name, value in options.items():
        number = not isinstance(value, bool) and isinstance(value, int | float)
        if name == "opener":
            ok, wanted = value is None or callable(value), "None or a function like os.open"
        elif name == "snapshot_every":
            ok, wanted = number and isinstance(value, int) and value >= 1, "an integer >= 1"
        elif name == "snapshot_share":
            ok, wanted = value is None or (number and 0 < value <= 1), "None or a number in (0, 1]"
        else:
            ok = (value is None and name == "replay_seconds") or (number and value > 0)
            wanted = "a number of seconds > 0"
        if not ok:
            raise ValueError(f"run option {name} must be {wanted}, got {value!r}")


class RunStore:
    """The one writer of a run directory. Make it with :meth:`create` or :meth:`resume`; both take the lock.

    A resumed store writes nothing until the resumed search first writes (the replay of its journal accepted),
    so a refused resume, by its own checks or by the replay's, changes no byte of the run directory.

    >>> import tempfile
    >>> from nas.core.types import Result, Trial, TrialState
    >>> d = Path(tempfile.mkdtemp()) / "run"
    >>> store = RunStore.create(d, {"space": "toy"})
    >>> t = Trial(0, {"a": 1}); store.on_submit(t); store.on_results([(t, Result(0, TrialState.COMPLETE, 1.0))])
    >>> RunStore.create(d, {"space": "toy"})
    Traceback (most recent call last):
    ...
    nas.run.lock.InUse: run directory '...' is in use by another search (pid ...); wait for it to end or choose ...
    >>> store.close(); sorted(p.name for p in d.iterdir())
    ['.lock', '.lock.json', 'run.json', 'trials.jsonl']
    """

    def __init__(self, path: Path, lock: RunLock, *, strategy: str = "", opener: Opener | None = None,
                 snapshot_every: int = 1000,
                 snapshot_seconds: float = 60.0, snapshot_share: float | None = 0.05,
                 status_interval: float = 1.0, replay_seconds: float | None = 2.0) -> None:
        self.path = path
        self._lock = lock
        self.strategy_name = strategy  # the run's strategy, as run.json names it: its snapshots say so
        self._opener = opener
        self._journal: JournalWriter | None = None
        self._pending: bytes | None = None  # a resume's run.json, written with the first write (see _begin)
        self.snapshot_every = snapshot_every
        self.snapshot_seconds = snapshot_seconds
        self.snapshot_share = snapshot_share  # at most this share of the time goes to snapshots (None: no bound)
        self.replay_seconds = replay_seconds  # a snapshot once the strategy worked this long since the last: the
        self._strategy_at_snapshot = 0.0  # most a resume replays (optuna's TPE: 20-65 ms per ask at 5,000 trials)
        self.status_interval = status_interval
        self.restored: Restored | None = None
        self.prior: RunConfig | None = None  # a resumed run's run.json as it was (the budget its journal ran under)
        self.records = 0  # journal records (lines) written so far, earlier sessions' included
        self.told = 0  # results journaled (and so told to the strategy)
        self._told_at_snapshot = 0
        self._snapshot_at = time.monotonic()
        self._snapshot_cost = 0.0
        self.snapshot_bytes = 0
        self.snapshots = 0  # snapshots written by this session
        self.snapshot_seconds_total = 0.0
        self._status_at = -1e9
        self._started = time.time()
        self.format_arch: Callable[[Any], str] | None = None  # best.json's one-line architecture
        self._kept: dict[int, None] = {}  # the trials whose checkpoints are on disk (those the executor keeps)
        self._undo: Callable[[], None] | None = None  # takes a new run back (discard), until it holds a record

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], config: RunConfig | dict[str, Any], **kw: Any) -> RunStore:
        """A new run of ``config`` (a :class:`nas.run.config.RunConfig`, or a mapping of its keys) in ``path``, which
        must be a new or empty directory (refused, naming what it holds, otherwise). Nothing is left behind when it
        fails (a full disk included): one line says why."""
        path, config = Path(path).absolute(), RunConfig.coerce(config)  # (a trial's os.chdir moves no file)
        with new_run(path) as (lock, wrote, undo):
            atomic_write(path / RUN_JSON, _json(config.to_json()))
            wrote.append(path / RUN_JSON)
            store = cls(path, lock, strategy=config.search.strategy, **kw)
            existed = (path / JOURNAL).exists()
            store._open_journal()
            if not existed:
                wrote.append(path / JOURNAL)
        store._undo = undo
        return store

    @classmethod
    def resume(cls, path: str | os.PathLike[str], config: RunConfig | dict[str, Any],
               check_trial: Callable[[Trial], None] | None = None, **kw: Any) -> RunStore:
        """Continue the run in ``path`` as ``config`` (its run.json as this call would write it). Every check
        runs before anything is written; the store writes from the resumed search's first write on (run.json's
        new budget, the lock's holder, a torn last journal line cut), so a refused resume changes no byte."""
        path, config = Path(path).absolute(), RunConfig.coerce(config)  # (a trial's os.chdir moves no file)
        prior = read_config(path)
        lock = RunLock(path).acquire()
        try:
            records, snapshot = resume_checks(path, prior, config, check_trial)
        except BaseException:
            lock.release()
            raise
        store = cls(path, lock, strategy=config.search.strategy, **kw)
        store.prior = prior
        store._pending = _json(prior.continued_by(config, _now()).to_json())
        store.records, store.told = len(records), sum(1 for r in records if r.kind == "result")
        store._told_at_snapshot = store.told
        store.restored = Restored(records, snapshot)
        return store

    @property
    def journal(self) -> JournalWriter:
        """The journal's writer (opened with the first write of a resumed run: see :meth:`_begin`)."""
        if self._journal is None:
            self._begin()
        assert self._journal is not None
        return self._journal

    def _begin(self) -> None:
        """A resumed run's first write: the lock's holder, run.json (its budget and resume times), the journal
        opened (a torn last line cut). Nothing before: a resume refused by its replay changes no byte."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                self._lock.write_holder()
                atomic_write(self.path / RUN_JSON, pending)
            except OSError as e:
                raise self._disk_error(e) from None
        if self._journal is None:
            self._open_journal()

    def _open_journal(self) -> None:
        try:
            self._journal = JournalWriter(self.path / JOURNAL, continue_with=self.continue_with,
                                          **({"opener": self._opener} if self._opener else {}))
        except OSError as e:
            raise self._disk_error(e) from None

    # -- the loop's points ------------------------------------------------------------------------
    def on_submit(self, trial: Trial) -> None:
        self.journal.write_submit(trial)
        self.records += 1

    def on_report(self, trial: Trial, report: Report) -> None:
        self.journal.write_report(trial, report)
        self.records += 1

    def on_results(self, batch: Sequence[tuple[Trial, Result]]) -> None:
        """Journal ``batch`` with one fsync; returns once it is on disk."""
        n = self.journal.write_results(batch)
        self.records += n
        self.told += n

    def keep_checkpoint(self, trial_id: int, data: bytes, kept: Container[int]) -> None:
        """Keep a checkpoint later trials start from (PBT, a promotion); those of trials not in ``kept`` (the ones
        the executor keeps: it dropped the others) are removed, so the disk holds what a resume can use."""
        self._begin()
        ckpts = self.path / CHECKPOINTS
        ckpts.mkdir(exist_ok=True)
        self._write(ckpts / f"{trial_id}.pt", data)
        self._kept[trial_id] = None
        for gone in [t for t in self._kept if t not in kept]:
            (ckpts / f"{gone}.pt").unlink(missing_ok=True)
            del self._kept[gone]

    def kept_checkpoints(self) -> list[tuple[int, bytes]]:
        """The kept checkpoints on disk (trial id, bytes), oldest first, each checked to hold no code."""
        ckpts = self.path / CHECKPOINTS
        if not ckpts.is_dir():
            return []
        out = []
        for trial_id in sorted(int(p.stem) for p in ckpts.glob("*.pt") if p.stem.isdigit()):
            out.append((trial_id, read_checkpoint(ckpts / f"{trial_id}.pt")))
        return out

    def note_kept(self, trial_id: int) -> None:
        self._kept[trial_id] = None

    def on_best(self, trial: Trial, result: Result, weights: bytes | None, arch_str: str | None = None) -> None:
        """A new best trial: its weights (when the executor kept them) to best.pt, then best.json naming
        the trial and the weights' hash; no weights: best.pt removed, so the pair never disagrees."""
        self._begin()
        if arch_str is None and self.format_arch is not None:
            try:
                arch_str = self.format_arch(trial.arch)
            except Exception:  # (a space's own format(), failing on this one: best.json holds the arch itself)
                arch_str = None
        if weights is not None:
            self._write(self.path / BEST_PT, weights)
        else:
            (self.path / BEST_PT).unlink(missing_ok=True)
        self._write(self.path / BEST_JSON, _json({
            "trial_id": trial.trial_id, "arch": dict(trial.arch), "arch_str": arch_str, "score": result.score,
            "hparams": dict(trial.hparams), "metrics": result.metrics,
            "weights": BEST_PT if weights is not None else None,
            "weights_sha256": hashlib.sha256(weights).hexdigest() if weights is not None else None,
        }))

    def fix_best(self, best: tuple[Trial, Result] | None) -> None:
        """After a resume: make best.json + best.pt name the journal's best trial, rewriting the weights from
        a kept checkpoint, or clearing them when none is kept. Weights that are not data (a crafted pickle,
        whatever best.json's hash says) are refused with one line, before anything is written."""
        have = read_json(self.path / BEST_JSON)
        if best is None:
            if have is not None or (self.path / BEST_PT).exists():
                self._begin()
                (self.path / BEST_PT).unlink(missing_ok=True)
                (self.path / BEST_JSON).unlink(missing_ok=True)
            return
        trial, result = best
        if have is not None and have.get("trial_id") == trial.trial_id and weights_match(self.path, have):
            if have.get("weights") is not None:
                read_checkpoint(self.path / BEST_PT)  # kept only if it is data
            return
        kept = self.path / CHECKPOINTS / f"{trial.trial_id}.pt"
        weights = read_checkpoint(kept) if kept.is_file() else None
        self.on_best(trial, result, weights)

    def snapshot_due(self, strategy_seconds: float) -> bool:
        """Whether a snapshot is due: ``snapshot_every`` results or ``snapshot_seconds`` have passed since the
        last one, or the strategy worked ``replay_seconds`` since (the most a resume replays), and (with
        ``snapshot_share``) enough time for the last snapshot's own cost to be at most that share of it: a
        strategy with a large state is snapshotted less often, never the driver's bulk."""
        if self.told == self._told_at_snapshot:
            return False
        now = time.monotonic()
        spacing = self._snapshot_cost / self.snapshot_share if self.snapshot_share else 0.0
        return not (now - self._snapshot_at < spacing or (
            self.told - self._told_at_snapshot < self.snapshot_every
            and now - self._snapshot_at < self.snapshot_seconds
            and (self.replay_seconds is None or strategy_seconds - self._strategy_at_snapshot < self.replay_seconds)))

    def snapshot(self, state: SnapshotState) -> None:
        """Write the strategy's and scheduler's state atomically, with the journal records it covers (never
        more than the synced journal holds)."""
        self.journal.sync()
        t0 = time.perf_counter()
        payload = {"format": SNAPSHOT_FORMAT, "strategy": self.strategy_name, "records": self.records,
                   "told": self.told, "state": state.strategy, "scheduler": state.scheduler}
        try:
            self.snapshot_bytes = write_snapshot(self.path / SNAPSHOT, payload)
        except OSError as e:
            raise self._disk_error(e) from None
        self._snapshot_cost = time.perf_counter() - t0
        self.snapshots += 1
        self.snapshot_seconds_total += self._snapshot_cost
        self._snapshot_at = time.monotonic()
        self._told_at_snapshot = self.told
        self._strategy_at_snapshot = state.strategy_seconds

    def status_due(self) -> bool:
        """Whether ``status_interval`` seconds have passed since status.json was last written."""
        return time.monotonic() - self._status_at >= self.status_interval

    def write_status(self, status: LoopStatus) -> None:
        """``status.json``: the loop's :class:`nas.engine.loop.LoopStatus` with who writes it (pid, host) and
        since when."""
        self._begin()
        self._status_at = time.monotonic()
        self._write(self.path / STATUS, _json({**status.to_dict(), "updated": time.time(), "started": self._started,
                                                "pid": os.getpid(), "host": socket.gethostname()}))

    def flush(self) -> None:
        """Hand the journal's last records to the OS (reports between results)."""
        self.journal.flush()

    def finish(self, status: LoopStatus, snapshot: SnapshotState | None) -> None:
        """The loop's end: the journal synced, a last snapshot (none after an error: the strategy may be
        mid-batch), the final status."""
        self.journal.sync()
        if snapshot is not None and self.told != self._told_at_snapshot:
            self.snapshot(snapshot)
        self.write_status(status)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
        self._lock.release()

    def discard(self) -> None:
        """Close a new run that failed to start before it journaled anything (Ray did not start, the cluster has too
        few CPUs, the executor could not be built) and take it back: its files (a new run's folder was new or empty,
        so every file of a run in it is its own), its lock and the folders its creation made go, and the same
        ``--run-dir`` starts it again. A resumed run, or one that journaled a record, is only closed."""
        if self._undo is None or self.records:
            self.close()
            return
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        take_back(self.path, self._undo)
        self._undo = None

    # -- helpers ----------------------------------------------------------------------------------
    @property
    def continue_with(self) -> str:
        """What continues this run after a full disk: a retraining (``nas.retrain``'s FixedArchs strategy) by its own
        command, which ``nas search --resume`` refuses."""
        if self.strategy_name == FixedArchs.__name__:
            return "run the same nas retrain command again"
        return f"resume with: nas search --resume {quote(str(self.path))}"

    def _write(self, path: Path, data: bytes) -> None:
        try:
            atomic_write(path, data)
        except OSError as e:
            raise self._disk_error(e) from None

    def _disk_error(self, e: OSError) -> Exception:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFull(f"{os_error_text(e)} ({self.path}): the journal holds every finished trial; "
                            f"free some space, then {self.continue_with}")
        return ValueError(f"cannot write to run directory {str(self.path)!r}: {os_error_text(e)} ({e.filename or e})")


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, default=str).encode()


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


__all__ = ["BEST_JSON", "BEST_PT", "CHECKPOINTS", "JOURNAL", "MANAGED", "RUN_JSON", "SNAPSHOT", "STATUS", "RunStore",
           "best_checkpoint", "best_weights", "check_checkpoint", "check_store_options", "read_config"]

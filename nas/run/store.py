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

The store takes values; it never holds the loop.

Layout: ``run.json`` (the :class:`nas.run.config.RunConfig` and the run's identity), ``trials.jsonl``
(:mod:`nas.run.journal`), ``snapshot.json`` (:mod:`nas.run.snapshot`), ``checkpoints/<id>.pt``,
``best.json`` + ``best.pt``, ``status.json``, ``.lock`` + ``.lock.json`` (:mod:`nas.run.lock`).

Each call's cost is O(1) in workers and trials (the snapshot's cost is that of the strategy's state,
and snapshots are spaced so that they take at most ~5% of the driver's time).
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.core.types import Report, Result, Trial
from nas.engine.replay import Restored
from nas.run.config import RunConfig
from nas.run.files import atomic_write
from nas.run.journal import DiskFull, JournalWriter, Opener, bulk_load, latest_results, read_records
from nas.run.lock import RunLock
from nas.run.snapshot import read_snapshot, write_snapshot

if TYPE_CHECKING:
    from nas.engine.interfaces import LoopStatus, SnapshotState

RUN_JSON, JOURNAL, SNAPSHOT, STATUS = "run.json", "trials.jsonl", "snapshot.json", "status.json"
BEST_JSON, BEST_PT, CHECKPOINTS = "best.json", "best.pt", "checkpoints"
SNAPSHOT_FORMAT = 1


def read_config(path: Path) -> RunConfig:
    """The :class:`nas.run.config.RunConfig` that ``run.json`` of the run directory ``path`` holds (format 2
    converted), type-checked: a one-line ValueError naming the file when it is none, corrupt, of another version,
    or holds a wrongly typed value."""
    cfg_path = path / RUN_JSON
    if not cfg_path.is_file():
        raise ValueError(f"{str(path)!r} is not a run directory (no run.json)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (ValueError, OSError) as e:
        raise ValueError(f"{cfg_path} is corrupt: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{cfg_path} is corrupt: it holds a {type(cfg).__name__}, not a table")
    try:
        return RunConfig.from_json(cfg)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {e}") from None


def check_checkpoint(data: bytes, where: object) -> bytes:
    """``data`` when it loads with ``torch.load(weights_only=True)`` (tensors and plain data, no code)."""
    import torch

    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # any failure: not a plain checkpoint, refuse it
        raise ValueError(f"{where} is not a plain checkpoint (torch.load(weights_only=True) refused it: "
                         f"{type(e).__name__})") from None
    return data


class RunStore:
    """The one writer of a run directory. Make it with :meth:`create` or :meth:`resume`; both take the lock.

    >>> import tempfile
    >>> from nas.core.types import Result, Trial, TrialState
    >>> d = Path(tempfile.mkdtemp()) / "run"
    >>> store = RunStore.create(d, {"space": "toy"})
    >>> t = Trial(0, {"a": 1}); store.on_submit(t); store.on_results([(t, Result(0, TrialState.COMPLETE, 1.0))])
    >>> RunStore.create(d, {"space": "toy"})
    Traceback (most recent call last):
    ...
    ValueError: run directory '...' is in use by another search (pid ...); wait for it to end or choose ...
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
        self.journal = JournalWriter(path / JOURNAL, **({"opener": opener} if opener else {}))
        self.snapshot_every = snapshot_every
        self.snapshot_seconds = snapshot_seconds
        self.snapshot_share = snapshot_share  # at most this share of the time goes to snapshots (None: no bound)
        self.replay_seconds = replay_seconds  # a snapshot once the strategy worked this long since the last: the
        self._strategy_at_snapshot = 0.0  # most a resume replays (optuna's TPE: 20-65 ms per ask at 5,000 trials)
        self.status_interval = status_interval
        self.restored: Restored | None = None
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
        self._kept: list[int] = []  # kept checkpoints, oldest first (a ring bounded by the executor)
        self._kept_head = 0

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], config: RunConfig | dict[str, Any], **kw: Any) -> RunStore:
        """A new run of ``config`` (a :class:`nas.run.config.RunConfig`, or a mapping of its keys) in ``path`` (made
        if missing); refused when it already holds a run."""
        path, config = Path(path), RunConfig.coerce(config)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"cannot create run directory {str(path)!r}: {e.strerror}") from None
        if not os.access(path, os.W_OK | os.X_OK) or _read_only(path):
            raise ValueError(f"run directory {str(path)!r} is not writable")
        lock = RunLock(path).acquire()
        try:
            if (path / JOURNAL).exists() or (path / RUN_JSON).exists():
                raise ValueError(f"run directory {str(path)!r} already holds a run; pass --resume to continue it "
                                 "or choose another --run-dir")
            lock.write_holder()
            atomic_write(path / RUN_JSON, _json(config.to_json()))
            return cls(path, lock, strategy=config.search.strategy, **kw)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def resume(cls, path: str | os.PathLike[str], config: RunConfig | dict[str, Any],
               check_trial: Callable[[Trial], None] | None = None, **kw: Any) -> RunStore:
        """Continue the run in ``path`` as ``config`` (its run.json as this call would write it). Every check
        runs before anything is written: a refused resume changes nothing on disk."""
        path, config = Path(path), RunConfig.coerce(config)
        prior = read_config(path)
        lock = RunLock(path).acquire()
        try:
            prior.check_resume(config, path)  # another search, or a lower budget: refused
            with bulk_load(freeze=True):
                records = list(read_records(path / JOURNAL))
            latest_results(records, path / JOURNAL)  # a second result of a trial not continued: corrupt
            if check_trial is not None:
                for rec in records:
                    check_trial(rec.trial)
            snapshot = read_snapshot(path / SNAPSHOT) if (path / SNAPSHOT).exists() else None
            if snapshot is not None:
                _check_snapshot(path, snapshot, config, len(records))
            lock.write_holder()
            store = cls(path, lock, strategy=config.search.strategy, **kw)  # (cuts a torn journal line)
            atomic_write(path / RUN_JSON, _json(prior.continued_by(config, _now()).to_json()))
        except BaseException:
            lock.release()
            raise
        store.records, store.told = len(records), sum(1 for r in records if r.kind == "result")
        store._told_at_snapshot = store.told
        store.restored = Restored(records, snapshot)
        return store

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

    def keep_checkpoint(self, trial_id: int, data: bytes, keep: int) -> None:
        """Keep a checkpoint later trials start from (PBT); the oldest beyond ``keep`` are removed."""
        ckpts = self.path / CHECKPOINTS
        ckpts.mkdir(exist_ok=True)
        self._write(ckpts / f"{trial_id}.pt", data)
        self._kept.append(trial_id)
        while len(self._kept) - self._kept_head > keep:
            (ckpts / f"{self._kept[self._kept_head]}.pt").unlink(missing_ok=True)
            self._kept_head += 1
        if self._kept_head > 1024:  # (compact the ring now and then: O(1) amortised)
            self._kept, self._kept_head = self._kept[self._kept_head:], 0

    def kept_checkpoints(self) -> list[tuple[int, bytes]]:
        """The kept checkpoints on disk (trial id, bytes), oldest first, each checked to hold no code."""
        ckpts = self.path / CHECKPOINTS
        if not ckpts.is_dir():
            return []
        out = []
        for trial_id in sorted(int(p.stem) for p in ckpts.glob("*.pt") if p.stem.isdigit()):
            p = ckpts / f"{trial_id}.pt"
            out.append((trial_id, check_checkpoint(p.read_bytes(), p)))
        return out

    def note_kept(self, trial_id: int) -> None:
        self._kept.append(trial_id)

    def on_best(self, trial: Trial, result: Result, weights: bytes | None, arch_str: str | None = None) -> None:
        """A new best trial: its weights (when the executor kept them) to best.pt, then best.json naming
        the trial and the weights' hash; no weights: best.pt removed, so the pair never disagrees."""
        if arch_str is None and self.format_arch is not None:
            arch_str = self.format_arch(trial.arch)
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
        a kept checkpoint, or clearing them when none is kept."""
        have = _read_json(self.path / BEST_JSON)
        if best is None:
            if have is not None or (self.path / BEST_PT).exists():
                (self.path / BEST_PT).unlink(missing_ok=True)
                (self.path / BEST_JSON).unlink(missing_ok=True)
            return
        trial, result = best
        if have is not None and have.get("trial_id") == trial.trial_id and _weights_match(self.path, have):
            return
        kept = self.path / CHECKPOINTS / f"{trial.trial_id}.pt"
        weights = check_checkpoint(kept.read_bytes(), kept) if kept.is_file() else None
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
        self.journal.close()
        self._lock.release()

    # -- helpers ----------------------------------------------------------------------------------
    def _write(self, path: Path, data: bytes) -> None:
        try:
            atomic_write(path, data)
        except OSError as e:
            raise self._disk_error(e) from None

    def _disk_error(self, e: OSError) -> Exception:
        import errno

        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFull(f"no space left on the device of {self.path}: the journal holds every finished trial; "
                            f"free some space, then resume with: nas search --resume {self.path}")
        return e


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


def best_weights(path: Path, trial_id: int) -> Path:
    """``best.pt`` of the run directory ``path`` once best.json says it holds ``trial_id``'s weights (and their
    hash agrees), else a ValueError saying why (e.g. a crash between the two writes: a resume repairs it)."""
    best = _read_json(path / BEST_JSON)
    if best is None or best.get("weights") is None or not (path / BEST_PT).is_file():
        raise ValueError(f"run {str(path)!r} saved no weights for its best trial (best.pt is missing)")
    if best.get("trial_id") != trial_id or not _weights_match(path, best):
        raise ValueError(f"best.pt of {str(path)!r} does not hold trial {trial_id}'s weights (the run stopped "
                         f"between writing best.pt and best.json); resume the run to repair the pair")
    return path / BEST_PT


def _weights_match(path: Path, best: dict[str, Any]) -> bool:
    pt = path / BEST_PT
    if best.get("weights") is None:
        return not pt.exists()
    try:
        return hashlib.sha256(pt.read_bytes()).hexdigest() == best.get("weights_sha256")
    except OSError:
        return False


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _read_only(path: Path) -> bool:
    import tempfile

    try:  # a real write, not only os.access: root ignores permission bits, read-only mounts do not
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError:
        return True
    return False


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, default=str).encode()


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")

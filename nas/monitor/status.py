"""``nas status RUN_DIR``: a run's progress from its directory, while it runs or after.

The journal (``trials.jsonl``) gives the finished trials; ``status.json``, which the run directory's owner
rewrites (atomically, at most once a second) from the loop's :class:`nas.engine.loop.LoopStatus` while a
search runs, adds what only the live loop knows:
the trials running now, and whether the loop is still going. Throughput is finished trials per second
of the run's wall time; the ETA is the trials left at that rate (or the time budget left, if sooner).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING, Any

import msgspec

from nas.engine.book import CONTINUATION_FAILED
from nas.engine.interfaces import Callback
from nas.monitor.usage import session_usage

if TYPE_CHECKING:
    from nas.core.types import Trial
    from nas.run.config import RunConfig
    from nas.run.journal import ResultsTail


def monitoring_callbacks(run_dir: str | os.PathLike[str], *, ray_namespace: str | None = None,
                         given: Sequence[Callback] = (), logs: Sequence[str] = (),
                         objectives: Sequence[str] = ("val_acc:max",)) -> list[Callback]:
    """What ``nas.search`` adds to the ``given`` callbacks: the run's ``--log`` writers
    (:func:`nas.monitor.logs.log_callbacks`), and on Ray (``ray_namespace`` given) a
    :class:`nas.monitor.metrics.MetricsCallback` whose ``nas-search`` actor lives in that namespace, unless one
    is given. (``status.json`` is written by the run directory's owner on its own clock.)"""
    out: list[Callback] = []
    if logs:
        from nas.monitor.logs import log_callbacks

        out += log_callbacks(logs, run_dir, objectives)
    if ray_namespace is None:
        return out
    from nas.monitor.metrics import MetricsCallback

    if any(isinstance(cb, MetricsCallback) for cb in given):
        return out
    return [*out, MetricsCallback(Path(run_dir).name, namespace=ray_namespace, objectives=objectives)]


def read_live(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``status.json`` as values, checked against its schema (:func:`nas.run.schema.read_status`: a wrongly typed
    field is one line naming it), or None when the run has none."""
    from nas.run.schema import read_status

    status = read_status(run_dir)
    return None if status is None else msgspec.structs.asdict(status)


def _alive(run_dir: str | os.PathLike[str], live: dict[str, Any]) -> bool:
    """Whether the search that writes status.json still runs: its run's lock is held (the OS drops it when the
    process dies, so a recorded pid that now belongs to another process says nothing)."""
    from nas.run.lock import held

    return live.get("state") == "running" and held(run_dir)


def run_status(run_dir: str | os.PathLike[str], now: float | None = None, *,
               tail: ResultsTail | None = None) -> dict[str, Any]:
    """Everything ``nas status`` prints, as values. ``tail``: the journal's reader, kept by a caller that asks
    again (``--watch``: each call parses only the lines appended since the last)."""
    from nas.monitor.pareto import front_status
    from nas.run.journal import ResultsTail
    from nas.run.reader import summary_frame
    from nas.run.store import JOURNAL, read_config
    from nas.run.supernet_store import supernet_status

    supernet = supernet_status(run_dir)  # (a supernet's training run: its own few lines)
    if supernet is not None:
        return supernet
    cfg = read_config(Path(run_dir))
    tail = tail if tail is not None else ResultsTail(Path(run_dir) / JOURNAL)
    latest = tail.read()
    df = summary_frame(latest.values())
    live = read_live(run_dir)
    now = time.time() if now is None else now
    budget = cfg.search.budget
    if live and live.get("budget"):
        budget = live["budget"]
    counts = df.state.value_counts().to_dict() if len(df) else {}
    alive = bool(live and _alive(run_dir, live))
    live_state = (live or {}).get("state")
    if live_state == "running":
        state = "running" if alive else "died"  # the writer is gone without saying so (killed)
    elif live_state:
        state = str(live_state)
    else:
        state = "finished" if budget and len(df) >= budget else "unknown (no status.json)"
    started = (live or {}).get("started") or (float(df.start_time.min()) if len(df) else None)
    workers = (live or {}).get("workers") or cfg.execution.workers
    # this session's wall time and utilization (a resumed run's journal also holds earlier sessions')
    usage = session_usage(df, live, workers, now=now if alive else None,
                          wall_clock=cfg.execution.executor != "simulated")
    elapsed = usage.wall
    finished = len(df)
    if cfg.execution.executor == "simulated":  # (its clock, and so the elapsed time, spans every session)
        in_session = finished
    elif live and live.get("finished") is not None:  # this session's finished trials, as the loop counted them
        in_session = int(live["finished"]) - int(live.get("resumed") or 0)
    else:
        in_session = len(df[df.end_time >= started]) if started is not None and len(df) else len(df)
    throughput = in_session / elapsed if elapsed > 0 else 0.0
    done = df[df.state == "COMPLETE"]
    best = done.loc[done.score.idxmax()] if len(done) else None
    left = max(budget - finished, 0) if budget else None
    eta = None
    if alive and left is not None and throughput > 0:
        eta = left / throughput
    if alive and live and live.get("time_budget"):
        remaining = live["time_budget"] - live.get("elapsed", 0) - (now - live.get("updated", now))
        eta = max(remaining, 0.0) if eta is None else min(eta, max(remaining, 0.0))
    return {
        "run_dir": str(run_dir), "space": cfg.search.space, "strategy": cfg.search.strategy,
        "workers": workers, "budget": budget, "state": state,
        "trial_workers": cfg.execution.trial_workers, "gang_strategy": cfg.execution.gang_strategy,
        "updated_ago": now - live["updated"] if live and "updated" in live else None,
        "finished": finished, "complete": int(counts.get("COMPLETE", 0)), "failed": int(counts.get("FAILED", 0)),
        "stopped": int(df.outcome.isin(["STOPPED", "PAUSED"]).sum()) if len(df) else 0,
        "unfinished": tail.unfinished,  # (a run that died: the trials it had running, which a resume runs again)
        "continuations_failed": int(df.error.str.startswith(CONTINUATION_FAILED, na=False).sum()) if len(df) else 0,
        "running": int(live.get("running", 0)) if alive and live else 0,
        "queued": int(live.get("queued", 0)) if alive and live else 0,
        "best_score": float(best.score) if best is not None else None,
        "best_trial": int(best.trial_id) if best is not None else None,
        "best_arch": _arch(cfg, latest[int(best.trial_id)][0], tail.path) if best is not None else None,
        "elapsed": elapsed, "throughput": throughput, "left": left, "eta": eta, "in_session": in_session,
        "time_budget": (live or {}).get("time_budget") or cfg.search.time_budget,
        "utilization": usage.utilization,
        **front_status(cfg, df),  # a multi-objective run: its Pareto front's size and hypervolume
    }


def _arch(cfg: RunConfig, trial: Trial, journal: Path) -> str:
    """A trial's architecture as the results table shows it (the registered space's one line, else JSON)."""
    from nas.run.reader import UnfitArchitecture, arch_text, registered_formatter

    try:
        return arch_text(trial.arch, registered_formatter(cfg))
    except ValueError as e:  # (as the results table says it)
        raise ValueError(f"{journal}: {UnfitArchitecture(0, trial.trial_id, e)}") from None


def _duration(seconds: float) -> str:
    """
    >>> _duration(42.0), _duration(129.0), _duration(7325.0)
    ('42 s', '2 min 09 s', '2 h 02 min')
    """
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def workers_text(st: dict[str, Any]) -> str:
    """The workers of a run, as ``nas status`` names them: trainer actors, or gangs of ranks (data-parallel trials).

    >>> workers_text({"workers": 2}), workers_text({"workers": 2, "trial_workers": 4, "gang_strategy": "SPREAD"})
    ('2 workers', '2 gangs x 4 ranks, SPREAD: actors nas-gang-<g>-rank-<r>')
    """
    ranks = st.get("trial_workers") or 1
    if ranks == 1:
        return f"{st['workers']} workers"
    gangs = f"{st['workers']} gang{'s' if st['workers'] != 1 else ''}"
    return f"{gangs} x {ranks} ranks, {st.get('gang_strategy') or 'PACK'}: actors nas-gang-<g>-rank-<r>"


def _best(st: dict[str, Any]) -> str:
    """The best trial's first objective by its name, in its own units and direction.

    >>> _best({"best_score": -3.5, "objectives": ["latency_ms:min", "val_acc:max"]})
    'latency_ms 3.5'
    >>> _best({"best_score": 0.91})
    'val_acc 0.91'
    """
    obj = (st.get("objectives") or ["val_acc:max"])[0]
    metric, _, mode = obj.partition(":")
    value = -st["best_score"] if mode == "min" else st["best_score"]
    return f"{metric} {value:.4g}"


def shown(st: dict[str, Any]) -> dict[str, Any]:
    """``st`` with its text (the run's space, strategy, architecture, objectives: read from its files) fit for a
    terminal: control characters shown (:func:`nas.core.terminal.visible`).

    >>> shown({"best_arch": "a\\x1b[2J", "objectives": ["x\\n:max"], "finished": 3})
    {'best_arch': 'a\\\\x1b[2J', 'objectives': ['x\\\\x0a:max'], 'finished': 3}
    """
    from nas.core.terminal import visible

    def one(v: Any) -> Any:
        return visible(v) if isinstance(v, str) else [one(x) for x in v] if isinstance(v, list | tuple) else v

    return {k: one(v) for k, v in st.items()}


def format_status(st: dict[str, Any]) -> str:
    if st.get("kind") == "supernet":
        return str(st["text"])
    st = shown(st)
    lines = [f"run       {st['run_dir']}  ({st['space']} / {st['strategy']}, budget {st['budget']}, "
             f"{workers_text(st)})"]
    state = st["state"]
    if st["updated_ago"] is not None and state == "running":
        state += f" (updated {_duration(st['updated_ago'])} ago)"
    lines.append(f"state     {state}")
    early = f" ({st['stopped']} stopped early)" if st.get("stopped") else ""
    lines.append(f"trials    {st['finished']}/{st['budget']} finished: {st['complete']} COMPLETE{early}, "
                 f"{st['failed']} FAILED; {st['running']} RUNNING, {st.get('queued', 0)} QUEUED")
    if st.get("continuations_failed"):
        lines.append(f"note      {_continuations(st)}")
    if st["state"] in ("died", "interrupted", "failed") and (n := st.get("unfinished")):
        lines.append(f"note      {n} trial{'s were' if n != 1 else ' was'} submitted and did not finish; a resume "
                     f"runs {'them' if n != 1 else 'it'} again (nas search --resume {quote(str(st['run_dir']))})")
    if st["best_score"] is not None:
        lines.append(f"best      {_best(st)} (trial {st['best_trial']}): {_cut(st['best_arch'], st['run_dir'])}")
    else:
        lines.append("best      - (no trial completed yet)")
    from nas.monitor.pareto import format_front_status

    if (front := format_front_status(st)) is not None:
        lines.append(front)
    util = f"; worker utilization {st['utilization']:.2f}" if st["utilization"] is not None else ""
    lines.append(f"speed     {st['throughput']:.3f} trials/s over {_duration(st['elapsed'])}{util}")
    if st["eta"] is not None:
        lines.append(f"ETA       {_duration(st['eta'])} ({st['left']} trials left)")
    elif st["state"] != "running" and st["left"]:
        why = ("its time budget ended it" if st["state"] == "finished" and st.get("time_budget") is not None
               else "the run is not running")  # (a finished run with trials left: its time budget was spent)
        lines.append(f"ETA       - ({st['left']} trials left; {why})")
    return "\n".join(lines)


#: the most of an architecture a status line shows (one of 2,000 decisions made a line of 23 KB)
ARCH_SHOWN = 300


def _cut(arch: str, run_dir: str) -> str:
    """``arch``, or its first :data:`ARCH_SHOWN` characters and where the whole of it is.

    >>> _cut("x" * 400, "runs/a")[-45:]
    'x... (400 characters in all: nas best runs/a)'
    """
    if len(arch) <= ARCH_SHOWN:
        return arch
    return f"{arch[:ARCH_SHOWN]}... ({len(arch):,} characters in all: nas best {quote(str(run_dir))})"


def _continuations(st: dict[str, Any]) -> str:
    """The promoted trials whose continuation failed: each kept its earlier score (not FAILED), so no failure count
    showed that every promotion of a run had failed."""
    n = st["continuations_failed"]
    return (f"{n} promoted trial{'s' * (n != 1)} failed to continue and kept {'their' if n != 1 else 'its'} earlier "
            f"score (the errors: nas results {quote(str(st['run_dir']))} --format json)")


def format_summary(st: dict[str, Any]) -> str:
    """The end-of-search lines, from the same values as ``nas status`` (one definition of wall time and
    utilization: :func:`nas.monitor.usage.run_usage`)."""
    st = shown(st)
    util = f"; worker utilization {st['utilization']:.2f}" if st["utilization"] is not None else ""
    session = st.get("in_session", st["finished"])  # (a resumed run: the time is this session's, and its trials)
    here = f"{session} of them in this session, " if session != st["finished"] else ""
    lines = [f"finished {st['finished']} trials ({here}{st['failed']} failed) in {_duration(st['elapsed'])}{util}"]
    if st.get("continuations_failed"):
        lines.append(_continuations(st))
    if st["best_score"] is not None:
        lines.append(f"best {_best(st)} (trial {st['best_trial']}): {_cut(st['best_arch'], st['run_dir'])}")
    elif st["failed"]:
        lines.append(f"no trial completed; see the errors with: nas results {quote(str(st['run_dir']))}")
    else:
        lines.append("no trial completed")
    return "\n".join(lines)

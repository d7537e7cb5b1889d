"""Search metrics on Ray's Prometheus export, and the loop's state as a named actor in the dashboard.

:class:`MetricsCallback` records, from the driver, with ``ray.util.metrics`` (tags ``run`` and
``strategy`` on every metric): trials started / finished / failed, the best value so far of
each objective in its own units (tag ``objective``, e.g. ``latency_ms:min``), the hypervolume and size of the
Pareto front of the scores so far (:class:`nas.core.front.FrontTracker`), the
population size, busy and total workers, the budget, a histogram of trial durations, and the time the
strategy spends in each ``ask`` and ``tell``. Ray's metrics agent exports them on each node's metrics
export port as ``ray_<name>`` (counters gain ``_total``; histograms ``_bucket``/``_count``/``_sum``),
which Ray's generated Prometheus config scrapes and ``dashboards/nas.json`` plots. Gauges are set through
:data:`nas.monitor.gauge_hold.HOLD`, which sets their last values again every half export interval while Ray is up
in this process: Ray drops a gauge that no export refreshed, so the final values would otherwise leave the
export 10-30 s after the search ends (and, during one long trial, between two events).

It also keeps a small actor named ``nas-search`` (in the run's namespace, next to the
``nas-trainer-<i>`` actors) whose state is the loop's status: it shows in the dashboard's actor list,
prints one line per update to its log (the dashboard's actor page shows it), and
``ray.get(ray.get_actor("nas-search", namespace=...).status.remote())`` returns it as a dict.

Ray's histograms reconstruct their ``_sum`` from bucket midpoints, so the exact strategy time is also a
counter (``nas_strategy_time_seconds``). Time per ask is measured from the loop status' ``strategy_seconds``
between hooks: an ask that proposes nothing is counted with the next ask or tell.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import re
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from nas.core.front import FrontTracker, front_point
from nas.core.objectives import Objectives
from nas.core.types import Outcome, Result, Trial
from nas.engine.interfaces import Callback, LoopStatus
from nas.engine.protocol import Event, EventKind
from nas.monitor.gauge_hold import HOLD

__all__ = ["METRICS", "MetricsCallback", "MetricSpec", "SearchStatus", "metrics_export_url",
           "parse_prometheus", "scrape"]

log = logging.getLogger(__name__)

TAGS = ("run", "strategy")
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
STRATEGY_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1, 3, 10)


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # counter, gauge or histogram
    description: str
    tag_keys: tuple[str, ...] = TAGS
    boundaries: tuple[float, ...] = ()

    @property
    def exported(self) -> tuple[str, ...]:
        """The series names Ray's Prometheus export gives this metric.

        >>> MetricSpec("nas_x", "counter", "").exported
        ('ray_nas_x_total',)
        """
        base = "ray_" + self.name
        if self.kind == "counter":
            return (base + "_total",)
        if self.kind == "histogram":
            return (base + "_bucket", base + "_count", base + "_sum")
        return (base,)


METRICS = (
    MetricSpec("nas_trials_started", "counter", "trials submitted to a worker"),
    MetricSpec("nas_trials_finished", "counter", "trials finished, COMPLETE or FAILED"),
    MetricSpec("nas_trials_failed", "counter", "trials that FAILED (error, NaN, worker died, stopped)"),
    MetricSpec("nas_best_value", "gauge", "best value so far of each objective, in the metric's own units "
               "(tag objective: metric:mode, e.g. latency_ms:min)", TAGS + ("objective",)),
    MetricSpec("nas_population_size", "gauge", "members in the strategy's population (0 if it keeps none)"),
    MetricSpec("nas_busy_workers", "gauge", "workers running a trial"),
    MetricSpec("nas_queued_trials", "gauge", "trials submitted and waiting for a worker (prefetched)"),
    MetricSpec("nas_worker_utilization", "gauge",
               "summed trial time / (workers x wall time) so far (nas.monitor.usage, as nas status)"),
    MetricSpec("nas_workers", "gauge", "workers in the pool"),
    MetricSpec("nas_budget", "gauge", "trials the run will finish"),
    MetricSpec("nas_hypervolume", "gauge", "hypervolume of the Pareto front of the scores so far, against the "
               "run's own reference (worst seen less a tenth of the range; one objective: best above it)"),
    MetricSpec("nas_front_size", "gauge", "trials on the Pareto front of the scores so far"),
    MetricSpec("nas_reports", "counter", "per-epoch reports received from the workers"),
    MetricSpec("nas_trials_ended_early", "counter", "trials a scheduler STOPPED or PAUSED (tag reason)",
               TAGS + ("reason",)),
    MetricSpec("nas_trial_duration_seconds", "histogram", "wall time of each finished trial",
               TAGS + ("state",), DURATION_BUCKETS),
    MetricSpec("nas_strategy_seconds", "histogram", "time the strategy spent in one ask or tell",
               TAGS + ("op",), STRATEGY_BUCKETS),
    MetricSpec("nas_strategy_time_seconds", "counter", "total time the strategy spent in ask or tell",
               TAGS + ("op",)),
)
EXPORTED_NAMES = frozenset(n for spec in METRICS for n in spec.exported)

_made: dict[str, Any] = {}  # one ray.util.metrics object per name in this process


def _metric(name: str) -> Any:
    if name not in _made:
        from ray.util import metrics

        spec = next(s for s in METRICS if s.name == name)
        if spec.kind == "counter":
            _made[name] = metrics.Counter(name, spec.description, tag_keys=spec.tag_keys)
        elif spec.kind == "gauge":
            _made[name] = metrics.Gauge(name, spec.description, tag_keys=spec.tag_keys)
        else:
            _made[name] = metrics.Histogram(name, spec.description, boundaries=list(spec.boundaries),
                                            tag_keys=spec.tag_keys)
    return _made[name]


def status_line(status: dict[str, Any]) -> str:
    """One line of the ``nas-search`` actor's log, stamped with the time of the update (local, ISO 8601).

    >>> status_line({"state": "running", "updated": 0.0, "finished": 3, "budget": 10, "failed": 0, "running": 2,
    ...              "queued": 1, "workers": 2, "best_score": -3.5, "objectives": ["latency_ms:min"]})[25:]
    ' running: 3/10 finished, 0 failed, busy 2/2, queued 1, best latency_ms 3.5000'
    """
    stamp = datetime.datetime.fromtimestamp(status.get("updated") or time.time()).astimezone()
    best = "-"
    if status.get("best_score") is not None:  # the first objective, by its name, in its own units
        first = Objectives((status.get("objectives") or ["val_acc:max"])[:1]).objectives[0]
        best = f"{first.metric} {first.score(status['best_score']):.4f}"
    return (f"{stamp.isoformat(timespec='seconds')} {status['state']}: {status['finished']}/"
            f"{status.get('budget') or '?'} finished, {status['failed']} failed, busy {status['running']}/"
            f"{status['workers']}, queued {status.get('queued', 0)}, best {best}")


@ray.remote(num_cpus=0)  # type: ignore[call-overload]
class SearchStatus:
    """The driver's search loop, as the dashboard's actor list shows it (named ``nas-search``)."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.state: dict[str, Any] = {}

    def update(self, state: dict[str, Any]) -> None:
        self.state = state
        print(status_line(state), flush=True)  # one line per update in the actor's log

    def status(self) -> dict[str, Any]:
        return self.state

    def __repr__(self) -> str:
        return f"nas-search({self.run})"


class MetricsCallback(Callback):
    """Records the search's metrics with ``ray.util.metrics`` and mirrors the loop's state into a
    ``nas-search`` actor (``status_actor=False`` to skip it). Needs Ray initialised in this process.
    ``nas.search`` attaches one when the executor is Ray. Events are buffered and recorded at most every
    ``interval`` seconds (and at the end): Ray exports every 10 s anyway, and a record costs tens of
    microseconds of driver time. Errors here are logged, never raised: monitoring never stops a search."""

    def __init__(self, run: str, *, namespace: str | None = None, status_actor: bool = True,
                 actor_name: str = "nas-search", interval: float = 1.0,
                 objectives: Sequence[str] = ("val_acc:max",)) -> None:
        if not ray.is_initialized():
            raise RuntimeError("MetricsCallback needs Ray: call ray.init() (or nas.connect()) first")
        self.run = run
        self.namespace = namespace
        self.actor_name = actor_name
        self.want_actor = status_actor
        self.interval = interval
        self.actor: Any = None
        self._seen_strategy_seconds = 0.0
        self._counts: dict[tuple[str, tuple[tuple[str, str], ...]], float] = collections.defaultdict(float)
        self._observed: list[tuple[str, float, dict[str, str]]] = []
        self._last_flush = 0.0
        self._warned = False
        self._front = FrontTracker()  # of every COMPLETE result's scores (FAILED/INFEASIBLE never join)
        self._objectives = Objectives(list(objectives) or ["val_acc:max"])
        self._best: list[float | None] = [None] * len(self._objectives)  # higher-is-better, per objective

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # monitoring must never break the search
            if not self._warned:
                log.warning("search metrics are not recorded: %s: %s", type(e).__name__, e)
                self._warned = True

    def _tags(self, status: LoopStatus, **extra: str) -> dict[str, str]:
        return {"run": self.run, "strategy": status.strategy, **extra}

    def _set(self, name: str, value: float, tags: dict[str, str]) -> None:
        HOLD.set(_metric(name), value, tags)  # (kept on the export after the search: see gauge_hold)

    def _count(self, name: str, tags: dict[str, str], value: float = 1.0) -> None:
        self._counts[(name, tuple(sorted(tags.items())))] += value

    def _strategy_time(self, status: LoopStatus, op: str) -> None:
        delta = status.strategy_seconds - self._seen_strategy_seconds
        self._seen_strategy_seconds = status.strategy_seconds
        if delta <= 0:
            return  # no ask happened (a trial re-queued by a resume)
        tags = self._tags(status, op=op)
        self._observed.append(("nas_strategy_seconds", delta, tags))
        self._count("nas_strategy_time_seconds", tags, delta)

    def _flush(self, status: LoopStatus, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < self.interval:
            return
        self._last_flush = now
        for (name, frozen), total in self._counts.items():
            _metric(name).inc(total, tags=dict(frozen))
        self._counts.clear()
        for name, value, obs_tags in self._observed:
            _metric(name).observe(value, tags=obs_tags)
        self._observed.clear()
        tags = self._tags(status)
        running = status.state == "running"
        self._set("nas_busy_workers", status.running if running else 0, tags)
        self._set("nas_queued_trials", status.queued if running else 0, tags)
        if status.utilization is not None:
            self._set("nas_worker_utilization", status.utilization, tags)
        self._set("nas_workers", status.workers, tags)
        self._set("nas_population_size", status.population, tags)
        if status.budget is not None:
            self._set("nas_budget", status.budget, tags)
        for o, best in zip(self._objectives, self._best):
            if best is not None:
                self._set("nas_best_value", o.score(best), {**tags, "objective": str(o)})  # (its own units)
        if self._front.size:
            self._set("nas_hypervolume", self._front.hypervolume(), tags)
            self._set("nas_front_size", self._front.size, tags)
        if self.actor is not None:
            ref = self.actor.update.remote({**status.to_dict(), "updated": time.time(),
                                            "objectives": self._objectives.to_list()})
            if not running:
                ray.get(ref, timeout=30)  # the final state is in before the driver may exit

    def _start(self, status: LoopStatus) -> None:
        self._seen_strategy_seconds = status.strategy_seconds
        if self.want_actor:
            # On the driver's node: it reports the driver's loop, and must not die with a worker node.
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
            self.actor = SearchStatus.options(  # type: ignore[attr-defined]
                name=self.actor_name, namespace=self.namespace, get_if_exists=True,
                scheduling_strategy=here).remote(self.run)
        self._flush(status, force=True)

    def _submit(self, status: LoopStatus, trial: Trial) -> None:
        self._count("nas_trials_started", self._tags(status, strategy=trial.strategy or status.strategy))
        self._strategy_time(status, "ask")
        self._flush(status)

    def _result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        tags = self._tags(status, strategy=trial.strategy or status.strategy)
        self._count("nas_trials_finished", tags)
        if not result.ok:
            self._count("nas_trials_failed", tags)
        elif result.outcome is not Outcome.COMPLETE:
            self._count("nas_trials_ended_early", {**tags, "reason": result.outcome.value})
        if (point := front_point(result)) is not None:  # (one objective: no front, no hypervolume)
            self._front.add(point)
        if result.ok:  # (each objective's best on its own: several trials may hold them)
            scores: list[float | None] = list(result.scores) if result.scores else [result.score]
            scores += [None] * len(self._best)
            self._best = [b if v is None or (b is not None and b >= v) else float(v)
                          for b, v in zip(self._best, scores)]
        if result.start_time is not None and result.end_time is not None:
            self._observed.append(("nas_trial_duration_seconds", max(result.end_time - result.start_time, 0.0),
                                   {**tags, "state": result.state.value}))
        self._strategy_time(status, "tell")
        self._flush(status)

    def on_start(self, status: LoopStatus) -> None:
        self._guard(self._start, status)

    def on_submit(self, status: LoopStatus, trial: Trial) -> None:
        self._guard(self._submit, status, trial)

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        self._guard(self._result, status, trial, result)

    def on_event(self, status: LoopStatus, event: Event) -> None:
        if event.kind is EventKind.REPORT:
            self._count("nas_reports", self._tags(status))
        self._guard(self._flush, status)  # a trial began: the busy gauge changes

    def on_end(self, status: LoopStatus) -> None:
        self._guard(lambda: self._flush(status, force=True))


# -- reading the export ------------------------------------------------------------------------------
def metrics_export_url() -> str:
    """The Prometheus export endpoint of the Ray node this process is attached to."""
    if not ray.is_initialized():
        raise RuntimeError("Ray is not initialised in this process")
    node = ray._private.worker.global_worker.node
    return f"http://{node.node_ip_address}:{node.metrics_export_port}/metrics"


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, prefix: str = "") -> list[tuple[str, dict[str, str], float]]:
    """Samples ``(name, labels, value)`` of a Prometheus text export, those whose name starts with
    ``prefix``.

    >>> parse_prometheus('# TYPE x gauge\\nray_nas_busy_workers{run="r",strategy="evolution"} 2.0\\n')
    [('ray_nas_busy_workers', {'run': 'r', 'strategy': 'evolution'}, 2.0)]
    """
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(prefix):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group(2) or "")}
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def scrape(url: str | None = None, prefix: str = "ray_nas_",
           timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """Read the platform's samples off a Ray node's export endpoint (default: this process's node)."""
    with urllib.request.urlopen(url or metrics_export_url(), timeout=timeout) as resp:
        return parse_prometheus(resp.read().decode(), prefix)

"""Keeps this process's last gauge values on Ray's metrics export for as long as Ray is up here.

Why: a Ray process exports a gauge only in the export interval in which it was set (the core worker's
OpenTelemetry recorder hands each value over once, then forgets it), and Ray's metrics agent drops a gauge
series that no export refreshed for two intervals (``2 x metrics_report_interval_ms``, 10 s by default). A
search sets its gauges when something happens; once it ends (or while one long trial trains) nothing does,
so the best value, busy workers, utilization and hypervolume left Ray's export 10-30 s later, even while
``nas search --keep-dashboard`` still held the cluster. :class:`GaugeHold` remembers the last value of each
series it set and sets them again once per half export interval, from a daemon thread, until Ray is shut
down in this process (or this process joins another cluster: the held values are dropped then).
Hand-written: Ray offers no "keep this gauge" switch, and a few lines do it.

>>> export_interval_s(10000), export_interval_s(200)  # Ray's emitter floors the interval at 1 s
(10.0, 1.0)
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


def export_interval_s(interval_ms: int | None = None) -> float:
    """Seconds between two of Ray's metric exports from a process: ``metrics_report_interval_ms`` (default: read
    from this process's Ray configuration), at least 1 s as Ray's emitter floors it."""
    if interval_ms is None:
        import ray

        interval_ms = int(ray._config.metrics_report_interval_ms())
    return max(interval_ms, 1000) / 1000.0


class GaugeHold:
    """The last value of every gauge series set through :meth:`set`, set again every half export interval."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, float]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._node: str | None = None  # the Ray node this process was attached to when the values were set

    def set(self, gauge: Any, value: float, tags: dict[str, str]) -> None:
        """Set ``gauge`` (a ``ray.util.metrics.Gauge``) for ``tags`` now, and keep it set."""
        import ray

        gauge.set(value, tags=tags)
        node = ray.get_runtime_context().get_node_id()
        with self._lock:
            if node != self._node:  # another cluster (or a fresh one): what was held belongs to the old one
                self._values.clear()
                self._node = node
            self._values[(gauge.info["name"], tuple(sorted(tags.items())))] = (gauge, value)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nas-gauge-hold", daemon=True)
                self._thread.start()

    def held(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """``{(name, sorted tags): value}`` of what is held now."""
        with self._lock:
            return {k: v for k, (_, v) in self._values.items()}

    def refresh(self) -> bool:
        """Set every held value again; False (and nothing held any more) once Ray is down or another cluster's."""
        import ray

        try:
            node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        except Exception:  # (Ray shutting down as we ask)
            node = None
        with self._lock:
            if node is None or node != self._node:
                self._values.clear()
                self._thread = None  # (the next set starts another)
                return False
            for (_, tags), (gauge, value) in self._values.items():
                gauge.set(value, tags=dict(tags))
        return True

    def _run(self) -> None:
        wait = threading.Event().wait
        try:
            step = export_interval_s() / 2
            while wait(step) is False and self.refresh():
                pass
        except Exception as e:  # monitoring never breaks a search, nor the process that ran one
            with self._lock:
                self._values.clear()
                self._thread = None
            log.warning("the search's final metric values are no longer re-exported: %s: %s", type(e).__name__, e)


HOLD = GaugeHold()  # one per process: the driver's gauges, whichever run set them

__all__ = ["HOLD", "GaugeHold", "export_interval_s"]

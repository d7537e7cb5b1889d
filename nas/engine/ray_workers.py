"""The Ray executor's workers (:class:`nas.engine.ray_pool.RayExecutor`): a fixed pool of named trainer actors
(``nas-trainer-<i>``), one per slot, and how many trials each holds.

A slot's load is the trials its worker holds (the running one and one queued behind it where prefetch is on), kept
by :class:`nas.engine.slots.SlotLoads` as the simulated executor keeps its workers', so taking a slot is O(1). A worker
that died is replaced in its slot (Ray places the new one on a live node); a replacement that cannot be placed (the
cluster no longer has the resources for the whole pool), that is not up within ``start_timeout`` seconds, or that
dies while starting retires its slot, and the pool shrinks."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.engine.slots import SlotLoads
from nas.engine.trainer_actor import TrainerActor

if TYPE_CHECKING:
    from nas.engine.protocol import TrainFn
    from nas.train.settings import TrainSettings

log = logging.getLogger(__name__)


class TrainerPool(SlotLoads):
    """``workers`` trainer actors of ``cpus``/``gpus`` each, started at once (each reads the space and the data from
    the object store: ``space_ref``, ``data_ref``); ``wake()`` is called when a replacement's start is decided."""

    def __init__(self, workers: int, *, space_ref: Any, data_ref: Any, settings: TrainSettings | None,
                 train: TrainFn | None, cpus: float, gpus: float, name_prefix: str, namespace: str | None,
                 start_timeout: float, wake: Callable[[], None]) -> None:
        self.cpus, self.gpus, self.namespace, self.start_timeout = cpus, gpus, namespace, start_timeout
        self._args = (space_ref, data_ref, settings, train)
        self._wake = wake
        self.names = [f"{name_prefix}-{i}" for i in range(workers)]
        self.actors: list[Any] = [None] * workers
        super().__init__(workers, up=False)  # each slot listed free once its worker is up
        self.starting: dict[int, tuple[ray.ObjectRef, float]] = {}  # slot -> (its replacement's ready ref, deadline)
        self.retired: list[int] = []  # slots whose worker was lost and could not be replaced
        self.restarts = 0
        try:
            for i in range(workers):
                self._start(i)
            self._wait_ready()
        except BaseException:  # (Ctrl-C or SIGTERM while they start: none is left behind on a joined cluster)
            self.shutdown()
            raise

    def _start(self, i: int) -> None:
        threads = max(1, math.floor(self.cpus))
        self.actors[i] = TrainerActor.options(  # type: ignore[attr-defined]
            name=self.names[i], namespace=self.namespace, num_cpus=self.cpus, num_gpus=self.gpus, max_concurrency=1,
        ).remote(self.names[i], *self._args, threads)

    def _wait_ready(self) -> None:
        """Fail fast, with the worker's own error, when the trainer cannot even start (e.g. a space
        class that the workers cannot import, or device='cuda' on a machine without one)."""
        try:  # (the constructor shuts the pool down on any failure here)
            ray.get([a.info.remote() for a in self.actors], timeout=self.start_timeout)
        except ray.exceptions.RayActorError as e:
            raise RuntimeError(f"trainer actors failed to start: {e}") from None
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"trainer actors were not placed and started within {self.start_timeout:g} s "
                               f"(start_timeout): the cluster lacks free resources for the pool") from None

    @property
    def slots(self) -> int:
        """Workers in the pool (retired slots excluded)."""
        return len(self.actors) - len(self.retired)

    def check(self) -> None:
        if self.slots == 0:
            raise RuntimeError(f"every trainer actor was lost and none could be replaced "
                               f"({len(self.retired)} slots retired): the Ray cluster has no room left for "
                               f"a worker of {self.cpus:g} CPUs / {self.gpus:g} GPUs")

    # -- lost workers ----------------------------------------------------------------------------------------
    def replace(self, slot: int) -> None:
        """Start a new worker in ``slot`` (Ray places it on a live node), or retire the slot at once
        when the cluster's resources can no longer hold the whole pool."""
        with contextlib.suppress(Exception):  # already dead is what we expect (a broken stream: not yet)
            ray.kill(self.actors[slot], no_restart=True)
        self.unlist(slot)  # the replacement is listed when it is up
        cluster = ray.cluster_resources()
        need_cpu, need_gpu = self.slots * self.cpus, self.slots * self.gpus
        if need_cpu > cluster.get("CPU", 0) + 1e-9 or need_gpu > cluster.get("GPU", 0) + 1e-9:
            self._retire(slot, f"the cluster has {cluster.get('CPU', 0):g} CPUs and {cluster.get('GPU', 0):g} "
                               f"GPUs, the pool needs {need_cpu:g} and {need_gpu:g}")
            return
        self._start(slot)
        ref = self.actors[slot].info.remote()
        self.starting[slot] = (ref, time.monotonic() + self.start_timeout)
        wake = self._wake
        ref.future().add_done_callback(lambda _: wake())  # wakes a waiting poll
        self.restarts += 1

    def next_deadline(self) -> float | None:
        """When the first replacement still starting must be up (time.monotonic()), or None."""
        return min((deadline for _, deadline in self.starting.values()), default=None)

    def check_starting(self) -> list[int]:
        """The slots whose replacement is up now (their worker is not listed free yet); those that died while starting
        or are past their deadline are retired."""
        up = []
        for slot, (ref, deadline) in list(self.starting.items()):
            done, _ = ray.wait([ref], timeout=0)
            if done:
                del self.starting[slot]
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    self._retire(slot, f"the replacement died while starting: {type(e).__name__}")
                    continue
                up.append(slot)
            elif time.monotonic() >= deadline:
                del self.starting[slot]
                self._retire(slot, f"the replacement was not placed and started within {self.start_timeout:g} s")
        return up

    def _retire(self, slot: int, why: str) -> None:
        with contextlib.suppress(Exception):
            ray.kill(self.actors[slot], no_restart=True)
        self.actors[slot] = None
        self.unlist(slot)
        self.retired.append(slot)
        log.warning("worker %s could not be replaced (%s): the pool shrinks to %d workers",
                    self.names[slot], why, self.slots)

    def shutdown(self) -> None:
        live = [actor for actor in self.actors if actor is not None]
        if live:  # (each writes the log lines of its last burst first)
            with contextlib.suppress(Exception):
                ray.wait([actor.flush.remote() for actor in live], num_returns=len(live), timeout=2.0)
        for actor in live:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self.actors = [None] * len(self.actors)
        self.starting.clear()
        self.unlist_all()


__all__ = ["TrainerPool"]

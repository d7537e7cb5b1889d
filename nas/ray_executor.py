"""The Ray executor: a fixed pool of named trainer actors, one trial at a time each.

The dataset and the space go into the object store once and every actor reads them from there.
Each actor keeps a trainer (and so the data as tensors, on its GPU where it has one) for its whole
life: starting an actor costs about a second, a trial on a warm actor costs a couple of milliseconds.
Checkpoints stay in the object store; the driver only holds references, and a trial with
``checkpoint_from`` receives the referenced state directly from the store.

A worker that dies mid-trial (process killed, node lost) is replaced and its trial resubmitted, up to
``max_retries`` times; after that the trial is recorded as FAILED and the search goes on. Ray places
the replacement on a live node. A replacement that cannot be placed never hangs the search: when the
cluster no longer has the resources for the whole pool (a node left), or the replacement is not up
within ``start_timeout`` seconds, or it dies while starting, its slot is retired and the pool shrinks;
its trial waits for the next free slot. Only when no slot is left does the search stop, with an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from collections import deque
from typing import Any

import ray
import ray.exceptions

from nas.data import Dataset
from nas.executor import CheckpointStore, Executor
from nas.space import SearchSpace
from nas.trainer import TorchTrainer, TrainerFactory, TrainSettings
from nas.types import Result, Trial

log = logging.getLogger(__name__)


@ray.remote
class TrainerActor:
    """One worker. Its torch thread count is its CPU share, so actors never oversubscribe cores."""

    def __init__(self, name: str, space: SearchSpace, data: Dataset, settings: TrainSettings,
                 factory: TrainerFactory, threads: int) -> None:
        import torch

        torch.set_num_threads(settings.threads or threads)
        self.name = name
        self.space = space
        factory_kwargs = {"worker": name} if factory is TorchTrainer else {}
        self.trainer = factory(data, settings, **factory_kwargs)
        if hasattr(self.trainer, "worker"):
            self.trainer.worker = name

    def run(self, trial: Trial, checkpoint: bytes | None) -> tuple[Result, bytes | None]:
        result, ckpt = self.trainer.run(trial, self.space, checkpoint)
        result.node = ray.get_runtime_context().get_node_id()[:12]
        return result, ckpt

    def info(self) -> dict[str, Any]:
        import torch

        return {"name": self.name, "pid": os.getpid(), "threads": torch.get_num_threads(),
                "cuda": torch.cuda.is_available(), "gpu_ids": ray.get_gpu_ids(),
                "node": ray.get_runtime_context().get_node_id()}


@dataclasses.dataclass
class _Running:
    trial: Trial
    slot: int
    ckpt_ref: ray.ObjectRef
    attempt: int
    actor: Any  # the worker it was sent to (a slot's worker may have been replaced since)


class RayExecutor(Executor):
    """Options: ``workers`` (actors in the pool), ``cpus_per_trial``, ``gpus_per_trial`` (fractional:
    0.25 packs four trials on one GPU; with no GPU in the cluster the run falls back to CPUs and says so),
    ``max_retries`` (resubmissions of a trial whose worker died), ``namespace`` for the actor names,
    ``start_timeout`` (seconds a worker may take to be placed and start before its slot is retired),
    ``prefetch`` (trials queued at each worker behind the one it runs, default 1: the next trial is
    already there when one ends, so the round trip to the driver and the journal's fsync never leave a
    worker idle; 0 sends a trial only to an idle worker)."""

    def __init__(
        self,
        space: SearchSpace,
        data: Dataset,
        settings: TrainSettings | None = None,
        *,
        workers: int = 2,
        trainer: TrainerFactory = TorchTrainer,
        cpus_per_trial: float = 1.0,
        gpus_per_trial: float = 0.0,
        max_retries: int = 2,
        name_prefix: str = "nas-trainer",
        namespace: str | None = None,
        start_timeout: float = 120.0,
        prefetch: int = 1,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if cpus_per_trial <= 0:
            raise ValueError(f"cpus_per_trial must be > 0, got {cpus_per_trial}")
        if gpus_per_trial < 0 or (gpus_per_trial > 1 and not float(gpus_per_trial).is_integer()):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] or a whole number, got {gpus_per_trial}")
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs Ray: call ray.init() (or nas.connect()) first")
        cluster = ray.cluster_resources()
        self.fallback_to_cpu = gpus_per_trial > 0 and cluster.get("GPU", 0) == 0
        if self.fallback_to_cpu:
            log.warning("no GPU in the Ray cluster: gpus_per_trial=%s ignored, training on CPUs",
                        gpus_per_trial)
            gpus_per_trial = 0.0
        if workers * cpus_per_trial > cluster.get("CPU", 0) + 1e-9:
            raise ValueError(
                f"{workers} workers x {cpus_per_trial:g} CPUs need {workers * cpus_per_trial:g} CPUs, "
                f"the Ray cluster has {cluster.get('CPU', 0):g}"
            )
        self.space = space
        self.settings = settings or TrainSettings()
        self.cpus_per_trial, self.gpus_per_trial = cpus_per_trial, gpus_per_trial
        if gpus_per_trial == 0 and self.settings.device == "auto":  # Ray leaves every GPU visible to an
            self.settings = dataclasses.replace(self.settings, device="cpu")  # actor that asked for none
        if gpus_per_trial == 0 and self.settings.device == "cuda":
            raise ValueError("device='cuda' needs a GPU per trial: pass gpus_per_trial > 0 (--gpus-per-trial) "
                             "on a Ray cluster with GPUs")
        self.max_retries = max_retries
        self.name_prefix = name_prefix
        self.namespace = namespace  # names are unique per namespace: one per run lets runs share a cluster
        self._factory = trainer
        self._space_ref = ray.put(space)
        self._data_ref = ray.put(data)  # once: every actor reads the same copy from the store
        self._actors: list[Any] = [None] * workers
        self._names = [f"{name_prefix}-{i}" for i in range(workers)]
        self.prefetch = prefetch
        # One token per trial a worker may hold (running + queued): a slot id, 1 + prefetch times.
        self._idle = [slot for _ in range(1 + prefetch) for slot in range(workers)][::-1]
        self._running: dict[ray.ObjectRef, _Running] = {}
        self._stopped: set[int] = set()
        self._ckpts = CheckpointStore(self.checkpoint_keep)
        self.restarts = 0
        self.start_timeout = start_timeout
        self.retired: list[int] = []  # slots whose worker was lost and could not be replaced
        self._starting: dict[int, tuple[ray.ObjectRef, float]] = {}  # slot -> (ready ref, deadline)
        self._retry: deque[tuple[Trial, int]] = deque()  # (trial, attempt) waiting for a slot
        self._done: list[tuple[Trial, Result]] = []  # stopped while waiting: returned by the next poll
        for i in range(workers):
            self._start_actor(i)
        self._wait_ready()

    def _start_actor(self, i: int) -> None:
        threads = max(1, math.floor(self.cpus_per_trial))
        self._actors[i] = TrainerActor.options(  # type: ignore[attr-defined]
            name=self._names[i], namespace=self.namespace, num_cpus=self.cpus_per_trial, num_gpus=self.gpus_per_trial,
            max_concurrency=1,
        ).remote(self._names[i], self._space_ref, self._data_ref, self.settings, self._factory, threads)

    def _wait_ready(self) -> None:
        """Fail fast, with the worker's own error, when the trainer cannot even start (e.g. a space
        class that the workers cannot import, or device='cuda' on a machine without one)."""
        try:
            ray.get([a.info.remote() for a in self._actors], timeout=self.start_timeout)
        except ray.exceptions.RayActorError as e:
            self.shutdown()
            raise RuntimeError(f"trainer actors failed to start: {e}") from None
        except ray.exceptions.GetTimeoutError:
            self.shutdown()
            raise RuntimeError(f"trainer actors were not placed and started within {self.start_timeout:g} s "
                               f"(start_timeout): the cluster lacks free resources for the pool") from None

    @property
    def slots(self) -> int:
        """Workers in the pool (retired slots excluded)."""
        return len(self._actors) - len(self.retired)

    @property
    def actor_names(self) -> list[str]:
        return list(self._names)

    def actor(self, i: int) -> Any:
        return self._actors[i]

    def free_slots(self) -> int:
        self._check_pool()
        return max(0, len(self._idle) - len(self._retry))

    def in_flight(self) -> int:
        return len(self._running) + len(self._retry)

    def _check_pool(self) -> None:
        if self.slots == 0:
            raise RuntimeError(f"every trainer actor was lost and none could be replaced "
                               f"({len(self.retired)} slots retired): the Ray cluster has no room left for "
                               f"a worker of {self.cpus_per_trial:g} CPUs / {self.gpus_per_trial:g} GPUs")

    def submit(self, trial: Trial, *, attempt: int = 0, slot: int | None = None) -> None:
        if slot is None:
            if not self._idle:
                raise RuntimeError("no free slot: submit only when free_slots() > 0")
            slot = self._idle.pop()
        try:
            source = self._ckpts.get(trial.checkpoint_from)
        except KeyError as e:  # evicted, or lost with a driver crash: the trial cannot start from it
            self._idle.append(slot)
            self._done.append((trial, Result.failed(trial.trial_id, str(e.args[0]))))
            return
        actor = self._actors[slot]
        result_ref, ckpt_ref = actor.run.options(num_returns=2).remote(trial, source)
        self._running[result_ref] = _Running(trial, slot, ckpt_ref, attempt, actor)

    def stop(self, trial_id: int) -> None:
        for ref, run in self._running.items():
            if run.trial.trial_id == trial_id:
                self._stopped.add(trial_id)
                ray.cancel(ref)
        for trial, attempt in list(self._retry):
            if trial.trial_id == trial_id:
                self._retry.remove((trial, attempt))
                self._done.append((trial, Result.failed(trial_id, "stopped")))

    def poll(self, timeout: float | None = None) -> list[tuple[Trial, Result]]:
        out, self._done = self._done, []
        self._check_starting()
        self._dispatch_retries()
        if not self._running and not self._starting:
            if self._retry:
                self._check_pool()
            return out
        refs = list(self._running) + [ref for ref, _ in self._starting.values()]
        if self._starting:  # wake up in time to retire a worker that does not start
            until = min(deadline for _, deadline in self._starting.values()) - time.monotonic()
            timeout = max(0.0, until if timeout is None else min(timeout, until))
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:  # collect everything else that is already done, without waiting
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            if ref not in self._running:
                continue  # a starting worker's ready signal: _check_starting takes it
            run = self._running.pop(ref)
            try:
                result = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                if self._actors[run.slot] is run.actor:  # the first of its trials to report the death
                    self._replace(run.slot)
                if run.attempt < self.max_retries and run.trial.trial_id not in self._stopped:
                    log.warning("worker %s died running trial %d (%s); retrying",
                                self._names[run.slot], run.trial.trial_id, type(e).__name__)
                    self._retry.append((run.trial, run.attempt + 1))
                    continue
                error = f"worker died {run.attempt + 1} times: {e}"
                if run.trial.trial_id in self._stopped:
                    self._stopped.discard(run.trial.trial_id)
                    error = "stopped"
                out.append((run.trial, Result.failed(run.trial.trial_id, error, worker=self._names[run.slot])))
                continue
            except ray.exceptions.TaskCancelledError:
                result = Result.failed(run.trial.trial_id, "stopped", worker=self._names[run.slot])
            except ray.exceptions.RayTaskError as e:  # the trainer itself raised outside run_safely
                result = Result.failed(run.trial.trial_id, str(e), worker=self._names[run.slot])
            if run.trial.trial_id in self._stopped:
                self._stopped.discard(run.trial.trial_id)
                result = Result.failed(run.trial.trial_id, "stopped", worker=self._names[run.slot])
            if result.ok:
                self._ckpts.put(run.trial.trial_id, run.ckpt_ref)
            if self._actors[run.slot] is run.actor:  # a replaced worker's token went with it
                self._idle.append(run.slot)
            out.append((run.trial, result))
        self._check_starting()
        self._dispatch_retries()
        return out

    def _dispatch_retries(self) -> None:
        while self._retry and self._idle:
            trial, attempt = self._retry.popleft()
            self.submit(trial, attempt=attempt, slot=self._idle.pop())

    def _replace(self, slot: int) -> None:
        """Start a new worker in ``slot`` (Ray places it on a live node), or retire the slot at once
        when the cluster's resources can no longer hold the whole pool."""
        with contextlib.suppress(Exception):  # already dead is what we expect
            ray.kill(self._actors[slot], no_restart=True)
        self._idle = [s for s in self._idle if s != slot]  # the replacement brings its own tokens
        cluster = ray.cluster_resources()
        need_cpu, need_gpu = self.slots * self.cpus_per_trial, self.slots * self.gpus_per_trial
        if need_cpu > cluster.get("CPU", 0) + 1e-9 or need_gpu > cluster.get("GPU", 0) + 1e-9:
            self._retire(slot, f"the cluster has {cluster.get('CPU', 0):g} CPUs and {cluster.get('GPU', 0):g} "
                               f"GPUs, the pool needs {need_cpu:g} and {need_gpu:g}")
            return
        self._start_actor(slot)
        self._starting[slot] = (self._actors[slot].info.remote(), time.monotonic() + self.start_timeout)
        self.restarts += 1

    def _check_starting(self) -> None:
        for slot, (ref, deadline) in list(self._starting.items()):
            done, _ = ray.wait([ref], timeout=0)
            if done:
                del self._starting[slot]
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    self._retire(slot, f"the replacement died while starting: {type(e).__name__}")
                    continue
                self._idle.extend([slot] * (1 + self.prefetch))
            elif time.monotonic() >= deadline:
                del self._starting[slot]
                self._retire(slot, f"the replacement was not placed and started within {self.start_timeout:g} s")

    def _retire(self, slot: int, why: str) -> None:
        with contextlib.suppress(Exception):
            ray.kill(self._actors[slot], no_restart=True)
        self._actors[slot] = None
        self._idle = [s for s in self._idle if s != slot]
        self.retired.append(slot)
        log.warning("worker %s could not be replaced (%s): the pool shrinks to %d workers",
                    self._names[slot], why, self.slots)

    def checkpoint(self, trial_id: int) -> bytes | None:
        if trial_id not in self._ckpts:
            return None
        try:
            return ray.get(self._ckpts.get(trial_id))  # type: ignore[call-overload]
        except ray.exceptions.RayError:  # kept on a node that has left the cluster
            log.warning("the checkpoint of trial %d was lost with its node", trial_id)
            return None

    def restore_checkpoint(self, trial_id: int, data: bytes) -> None:
        self._ckpts.put(trial_id, ray.put(data))

    def shutdown(self) -> None:
        for actor in self._actors:
            if actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
        self._actors = [None] * len(self._actors)
        self._running.clear()
        self._starting.clear()
        self._retry.clear()
        self._idle = []

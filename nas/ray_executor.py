"""The Ray executor: a fixed pool of named trainer actors, one trial at a time each.

The dataset and the space go into the object store once and every actor reads them from there.
Each actor keeps a trainer (and so the data as tensors, on its GPU where it has one) for its whole
life: starting an actor costs about a second, a trial on a warm actor costs a couple of milliseconds.
Checkpoints stay in the object store; the driver only holds references, and a trial with
``checkpoint_from`` receives the referenced state directly from the store.

A worker that dies mid-trial (process killed, node lost) is replaced and its trial resubmitted, up to
``max_retries`` times; after that the trial is recorded as FAILED and the search goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
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


class RayExecutor(Executor):
    """Options: ``workers`` (actors in the pool), ``cpus_per_trial``, ``gpus_per_trial`` (fractional:
    0.25 packs four trials on one GPU; with no GPU in the cluster the run falls back to CPUs and says so),
    ``max_retries`` (resubmissions of a trial whose worker died), ``namespace`` for the actor names."""

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
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if cpus_per_trial <= 0:
            raise ValueError(f"cpus_per_trial must be > 0, got {cpus_per_trial}")
        if not 0 <= gpus_per_trial <= 1 and not float(gpus_per_trial).is_integer():
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
        self.max_retries = max_retries
        self.name_prefix = name_prefix
        self.namespace = namespace  # names are unique per namespace: one per run lets runs share a cluster
        self._factory = trainer
        self._space_ref = ray.put(space)
        self._data_ref = ray.put(data)  # once: every actor reads the same copy from the store
        self._actors: list[Any] = [None] * workers
        self._names = [f"{name_prefix}-{i}" for i in range(workers)]
        self._idle = list(range(workers))[::-1]
        self._running: dict[ray.ObjectRef, _Running] = {}
        self._stopped: set[int] = set()
        self._ckpts = CheckpointStore(self.checkpoint_keep)
        self.restarts = 0
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
            ray.get([a.info.remote() for a in self._actors])
        except ray.exceptions.RayActorError as e:
            self.shutdown()
            raise RuntimeError(f"trainer actors failed to start: {e}") from None

    @property
    def slots(self) -> int:
        return len(self._actors)

    @property
    def actor_names(self) -> list[str]:
        return list(self._names)

    def actor(self, i: int) -> Any:
        return self._actors[i]

    def free_slots(self) -> int:
        return len(self._idle)

    def in_flight(self) -> int:
        return len(self._running)

    def submit(self, trial: Trial, *, attempt: int = 0, slot: int | None = None) -> None:
        if slot is None:
            if not self._idle:
                raise RuntimeError("no free slot: submit only when free_slots() > 0")
            slot = self._idle.pop()
        source = self._ckpts.get(trial.checkpoint_from) if trial.checkpoint_from is not None else None
        result_ref, ckpt_ref = self._actors[slot].run.options(num_returns=2).remote(trial, source)
        self._running[result_ref] = _Running(trial, slot, ckpt_ref, attempt)

    def stop(self, trial_id: int) -> None:
        for ref, run in self._running.items():
            if run.trial.trial_id == trial_id:
                self._stopped.add(trial_id)
                ray.cancel(ref)

    def poll(self, timeout: float | None = None) -> list[tuple[Trial, Result]]:
        if not self._running:
            return []
        refs = list(self._running)
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:  # collect everything else that is already done, without waiting
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        out = []
        for ref in ready:
            run = self._running.pop(ref)
            try:
                result = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                self._replace(run.slot)
                if run.attempt < self.max_retries and run.trial.trial_id not in self._stopped:
                    log.warning("worker %s died running trial %d (%s); retrying",
                                self._names[run.slot], run.trial.trial_id, type(e).__name__)
                    self.submit(run.trial, attempt=run.attempt + 1, slot=run.slot)
                    continue
                result = Result.failed(run.trial.trial_id, f"worker died {run.attempt + 1} times: {e}",
                                       worker=self._names[run.slot])
            except ray.exceptions.TaskCancelledError:
                result = Result.failed(run.trial.trial_id, "stopped", worker=self._names[run.slot])
            except ray.exceptions.RayTaskError as e:  # the trainer itself raised outside run_safely
                result = Result.failed(run.trial.trial_id, str(e), worker=self._names[run.slot])
            if run.trial.trial_id in self._stopped:
                self._stopped.discard(run.trial.trial_id)
                result = Result.failed(run.trial.trial_id, "stopped", worker=self._names[run.slot])
            if result.ok:
                self._ckpts.put(run.trial.trial_id, run.ckpt_ref)
            self._idle.append(run.slot)
            out.append((run.trial, result))
        return out

    def _replace(self, slot: int) -> None:
        with contextlib.suppress(Exception):  # already dead is what we expect
            ray.kill(self._actors[slot], no_restart=True)
        self._start_actor(slot)
        self.restarts += 1

    def checkpoint(self, trial_id: int) -> bytes | None:
        if trial_id not in self._ckpts:
            return None
        return ray.get(self._ckpts.get(trial_id))  # type: ignore[call-overload]

    def shutdown(self) -> None:
        for actor in self._actors:
            if actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
        self._actors = [None] * len(self._actors)
        self._running.clear()
        self._idle = []

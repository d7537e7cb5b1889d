"""The second table of ``nas bench train``: the aggregate throughput of several trials packed on one GPU.

k trainer actors share one GPU through :class:`nas.engine.ray_pool.RayExecutor` with ``gpus_per_trial = 1/k`` (Ray
fractional GPUs); each pool is kept busy (submit while a slot is free, then poll: Ray's own pool is what is
measured, no strategy runs) for one warm-up trial per actor, then ``trials_per_worker`` timed trials per actor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from nas.core.space import SearchSpace
from nas.core.types import Arch, Trial
from nas.engine.protocol import finished
from nas.train.data import Dataset
from nas.train.settings import TrainSettings

from .harness import text_table


def packing(space: SearchSpace, arch: Arch, dataset: Dataset, *, epochs: int, batch_size: int, lr: float,
            packs: Sequence[int], trials_per_worker: int, amp: bool) -> list[dict[str, Any]]:
    """Aggregate samples/s of k trainer actors sharing one GPU (``gpus_per_trial = 1/k``)."""
    import ray

    from nas.engine.ray_pool import RayExecutor

    settings = TrainSettings(epochs=epochs, batch_size=batch_size, lr=lr, device="cuda", amp=amp)
    cpus = ray.cluster_resources().get("CPU", 1)
    rows = []
    for k in packs:
        ex = RayExecutor(space, dataset, settings, workers=k, gpus_per_trial=1 / k,
                         cpus_per_trial=min(1.0, cpus / k), namespace=f"nas-bench-train-{k}")
        try:
            run_trials(ex, space, arch, k, 0)  # warm-up: one trial per actor (CUDA context, cuDNN tuning)
            t0 = time.perf_counter()
            results = run_trials(ex, space, arch, k * trials_per_worker, 1000)
            wall = time.perf_counter() - t0
        finally:
            ex.shutdown()
        bad = [r for r in results if not r.ok or r.metrics.get("device") != "cuda"]
        if bad:
            raise RuntimeError(f"{len(bad)} packed trials failed or ran off the GPU: {bad[0].error}")
        per_trial = statistics.median(r.metrics["samples_per_second"] for r in results)
        rows.append({"trials": k, "gpus_per_trial": 1 / k, "aggregate": len(results) * len(dataset.x_train)
                     * epochs / wall, "per_trial": per_trial, "wall": wall})
    for row in rows:
        row["speedup"] = row["aggregate"] / rows[0]["aggregate"]
    return rows


def run_trials(ex: Any, space: SearchSpace, arch: Arch, count: int, first_id: int) -> list[Any]:
    """Keep every slot of ``ex`` busy until ``count`` trials of ``arch`` are done."""
    submitted = 0
    results: list[Any] = []
    while len(results) < count:
        while submitted < count and ex.free_slots():
            ex.submit(Trial(first_id + submitted, arch))
            submitted += 1
        done = ex.poll(timeout=60)
        if not done and not ex.in_flight():
            raise RuntimeError(f"the trainer pool stopped with {len(results)} of {count} trials done")
        results += [result for _, result in finished(done)]
    return results


def print_packing(space: SearchSpace, arch: Arch, dataset: Dataset, *, epochs: int, batch_size: int, lr: float,
                  packs: Sequence[int], trials_per_worker: int, amp: bool, address: str | None) -> list[dict[str, Any]]:
    """The packing table, a row as each pool size is measured (skipped where the Ray cluster has no GPU)."""
    from nas.api import connect

    connect(address)
    import ray

    if not ray.cluster_resources().get("GPU"):
        print("packing trials on one GPU needs a GPU in the Ray cluster: skipped (it has none)")
        return []
    print(f"\ntrials packed on one GPU ({space.registered_name} {space.format(arch)}; "
          f"{trials_per_worker} timed trials per actor after one warm-up each):")
    rows = [["trials", "gpus/trial", "aggregate samples/s", "per-trial samples/s", "speedup vs 1"]]
    out = []
    for p in packing(space, arch, dataset, epochs=epochs, batch_size=batch_size, lr=lr, packs=packs,
                     trials_per_worker=trials_per_worker, amp=amp):
        out.append(p)
        rows.append([str(p["trials"]), f"{p['gpus_per_trial']:.3g}", f"{p['aggregate']:,.0f}",
                     f"{p['per_trial']:,.0f}", f"{p['speedup']:.2f}"])
        print(text_table(rows).splitlines()[-1] if len(rows) > 2 else text_table(rows), flush=True)
    return out

"""The per-trial Ray Train start that ``nas bench gang`` measures a warm gang against: each trial one
``TorchTrainer(...).fit()`` with ``ScalingConfig(num_workers=R)``, as a Ray Tune trial that trains data-parallel
does (Tune runs a Ray Train trainer per trial). The training inside is a plain DDP loop (``prepare_model``) over the
same model, data, per-rank batches (:mod:`nas.train.shard`'s order), optimizer and epochs as our side, with a
validation pass per epoch; the loop times itself from the DDP wrap to the end of the last validation, so each side's
fixed cost per trial is its wall time per trial minus its training function's own seconds. (Rank 0 writes its
figures to a file: Ray Train 2's ``Result.metrics`` keeps only metrics reported with a checkpoint, and a checkpoint
would add a cost a trial that needs none does not pay.)
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def ddp_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker's training (run by Ray Train on each of its workers)."""
    import ray.train
    import ray.train.torch
    import torch

    from nas.train.shard import batch_spans, shard_order

    torch.set_num_threads(1)  # one CPU per worker, as our ranks
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    x, y = torch.from_numpy(config["x"]), torch.from_numpy(config["y"])
    xv, yv = torch.from_numpy(config["x_val"]), torch.from_numpy(config["y_val"])
    warm = torch.nn.Linear(2, 1)  # torch's one-off costs (a first optimizer step imports a lot), outside the timing,
    torch.optim.Adam(warm.parameters()).step()  # as our ranks pay them when their gang starts
    torch.manual_seed(config["seed"])
    model = config["space"].build(config["arch"], config["task"])
    t0 = time.perf_counter()
    net = ray.train.torch.prepare_model(model)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        net.train()
        rows = shard_order(len(x), seed=config["seed"], epoch=epoch, rank=rank, world=world)
        for i, j in batch_spans(len(rows), config["batch_size"]):
            loss = torch.nn.functional.cross_entropy(net(x[rows[i:j]]), y[rows[i:j]])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        with torch.no_grad():
            model.eval()
            lo, hi = rank * len(xv) // world, (rank + 1) * len(xv) // world
            right = torch.tensor([float((model(xv[lo:hi]).argmax(1) == yv[lo:hi]).sum())])
            torch.distributed.all_reduce(right)
    figures = {"loop_seconds": time.perf_counter() - t0, "val_acc": float(right) / len(xv)}
    if rank == 0:
        Path(config["out"]).write_text(json.dumps(figures))


def ray_train_trials(space: Any, arch: Any, data: Any, *, ranks: int, trials: int, epochs: int, batch_size: int,
                     lr: float, seed: int) -> list[dict[str, float]]:
    """``trials`` TorchTrainer fits of ``ranks`` workers (1 CPU each); per trial its wall and loop seconds."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from nas.train.data import load_dataset

    dataset = load_dataset(data, seed=seed) if isinstance(data, str) else data
    config = {"space": space, "arch": dict(arch), "task": dataset.task, "x": np.asarray(dataset.x_train),
              "y": np.asarray(dataset.y_train), "x_val": np.asarray(dataset.x_val), "y_val": np.asarray(dataset.y_val),
              "epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed}
    out = []
    with tempfile.TemporaryDirectory(prefix="nas-bench-gang-") as storage:
        for k in range(trials):
            out_file = Path(storage) / f"figures-{k}.json"
            trainer = TorchTrainer(ddp_loop, train_loop_config={**config, "out": str(out_file)},
                                   scaling_config=ScalingConfig(num_workers=ranks, resources_per_worker={"CPU": 1}),
                                   run_config=RunConfig(name=f"trial-{k}", storage_path=storage))
            t0 = time.perf_counter()
            trainer.fit()
            wall = time.perf_counter() - t0
            figures = json.loads(out_file.read_text())
            out.append({"wall": wall, "train": figures["loop_seconds"], "val_acc": figures["val_acc"]})
    return out


__all__ = ["ddp_loop", "ray_train_trials"]

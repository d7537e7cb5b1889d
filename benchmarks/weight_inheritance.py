"""``nas bench inherit``: what weight inheritance (Real et al. 2017) buys a child after one epoch of training.

Validation accuracy after one epoch with and without its parent's weights, mean over many children of one parent,
side by side.

For each task (scikit-learn's 8x8 digits, and a generated 32x32 RGB image task, :mod:`nas.train.synthetic`):
a parent NAS-Bench-201 cell is trained for ``--parent-epochs`` epochs by :class:`nas.train.runner.TrialRunner`;
then ``--children`` one-edge mutations of it (``space.mutate``, seeded) are each trained for ONE epoch twice,
by the same trainer, with the same seed (so every tensor not inherited starts from the same initialisation):

- *scratch*: from its fresh initialisation;
- *inherited*: every tensor whose name and shape the mutation left unchanged copied from the parent's
  checkpoint (:func:`nas.train.inherit.inherit_weights`), the rest as initialised.

The table also shows the inherited child's accuracy before any training (how much of the parent survives
the mutation) and the share of parameters inherited. Accuracies are measured, never asserted; the training
seconds of both sides are printed so that neither side hides a cost (inheritance itself takes milliseconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import time
from typing import Any

import numpy as np
import torch

from nas.cli.common import file_arg
from nas.core.types import Trial
from nas.search_spaces.nb201 import NB201Space, from_op_code
from nas.train.data import Dataset, load_dataset
from nas.train.hparams import make_optimizer
from nas.train.inherit import inherit_optimizer_state, inherit_weights, optimizer_param_names
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings

from . import add_experiment
from .harness import QUICK_WINS, apply_quick, at_least, text_table, write_json

PARENT = "334131"  # a mid-size cell: 3 convolutions, a pool and two skips (NAS-Bench-201 op code)


def tasks(samples: int, seed: int) -> list[Dataset]:
    from nas.train.synthetic import synthetic_images

    images = Dataset.from_arrays(*synthetic_images(samples, seed=seed), seed=seed, name="images-32")
    return [load_dataset("digits", seed=seed), images]


def parent_param_names(trainer: TrialRunner, space: NB201Space, parent: dict[str, Any]) -> list[str]:
    """The names of the parent optimizer's parameters in its order, from the parent rebuilt (a checkpoint of
    TrialRunner holds the optimizer's state by index only)."""
    assert trainer.side is not None
    model, _ = trainer.side.build(parent["arch"], space)
    return optimizer_param_names(model, make_optimizer(model, trainer.settings.for_trial(Trial(0, parent["arch"]))))


def inherited_checkpoint(trainer: TrialRunner, trial: Trial, space: NB201Space, parent: dict[str, Any],
                         names: list[str] | None) -> tuple[bytes, float, float]:
    """The child built as the trainer builds it (same seed, so the same fresh tensors), with the parent's
    tensors inherited (and, given ``names``, its optimizer state), as checkpoint bytes at epoch 0 that
    TrialRunner starts from; also the share of parameters inherited and the accuracy before training."""
    torch.manual_seed(trainer.settings.seed * 1_000_003 + trial.trial_id)  # what TrialRunner seeds first
    assert trainer.side is not None
    model, _ = trainer.side.build(trial.arch, space)
    stats = inherit_weights(model, parent["model"])
    _, acc0 = trainer.side.evaluate(model)
    state: dict[str, Any] = {"model": {k: v.cpu() for k, v in model.state_dict().items()}, "epoch": 0}
    if names is not None:
        hp = trainer.settings.for_trial(trial)
        opt = make_optimizer(model, hp)
        inherit_optimizer_state(model, opt, parent["optimizer"], names)
        state.update(optimizer=opt.state_dict(), optimizer_name=hp["optimizer"])
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue(), stats.fraction, acc0


def run_task(data: Dataset, settings: TrainSettings, *, children: int, parent_epochs: int, seed: int,
             channels: int = 8) -> dict[str, Any]:
    """The parent's figures and, per child, accuracy after one epoch from scratch and inherited."""
    space, rng = NB201Space(channels=channels), np.random.default_rng(seed)
    trainer = TrialRunner(data, settings)
    parent_arch = from_op_code(PARENT)
    parent, ckpt = trainer.run(Trial(0, parent_arch, epochs=parent_epochs), space, None)
    if not parent.ok or ckpt is None:
        raise RuntimeError(f"the parent failed to train: {parent.error}")
    parent_state = torch.load(io.BytesIO(ckpt), map_location="cpu", weights_only=True)
    names = parent_param_names(trainer, space, parent_state)
    rows = []
    for i in range(1, children + 1):
        arch = space.mutate(parent_arch, rng)
        trial = Trial(i, arch, epochs=1, parent=0)
        scratch, _ = trainer.run(trial, space, None)
        t0 = time.perf_counter()
        child_ckpt, fraction, acc0 = inherited_checkpoint(trainer, trial, space, parent_state, None)
        inherit_seconds = time.perf_counter() - t0
        inherited, _ = trainer.run(dataclasses.replace(trial, inherit_from=0), space, child_ckpt)
        with_opt, _ = trainer.run(dataclasses.replace(trial, inherit_from=0), space,
                                  inherited_checkpoint(trainer, trial, space, parent_state, names)[0])
        for r in (scratch, inherited, with_opt):
            if not r.ok:
                raise RuntimeError(f"child {space.format(arch)} failed to train: {r.error}")
        rows.append({"arch": space.format(arch), "fraction": fraction, "before": acc0,
                     "scratch": float(scratch.score or 0.0), "inherited": float(inherited.score or 0.0),
                     "inherited_opt": float(with_opt.score or 0.0),
                     "scratch_seconds": float(scratch.metrics["train_seconds"]),
                     "inherited_seconds": float(inherited.metrics["train_seconds"]),
                     "inherit_seconds": inherit_seconds})
    return {"dataset": data.name, "train": len(data.x_train), "val": len(data.x_val),
            "parent": space.format(parent_arch), "parent_epochs": parent_epochs,
            "parent_acc": float(parent.score or 0.0), "children": rows}


def summary(task: dict[str, Any]) -> dict[str, float]:
    rows = task["children"]

    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in rows)

    def sd(key: str) -> float:
        return statistics.stdev(r[key] for r in rows) if len(rows) > 1 else 0.0

    out = {k: mean(k) for k in ("scratch", "inherited", "inherited_opt", "before", "fraction", "scratch_seconds",
                                "inherited_seconds", "inherit_seconds")}
    out.update({f"{k}_sd": sd(k) for k in ("scratch", "inherited", "inherited_opt")})
    out["wins"] = sum(r["inherited"] > r["scratch"] for r in rows)
    out["wins_opt"] = sum(r["inherited_opt"] > r["scratch"] for r in rows)
    return out


def handler(args: argparse.Namespace) -> int:
    at_least(1, children=args.children, parent_epochs=args.parent_epochs)
    at_least(100, samples=args.samples)
    at_least(1, channels=args.channels, threads=args.threads)
    apply_quick(args, children=2, parent_epochs=1, samples=200)  # (after the checks)
    torch.set_num_threads(args.threads)
    settings = TrainSettings(epochs=1, seed=args.seed, device=args.device, threads=args.threads)
    print(f"nas bench inherit: {args.children} one-edge mutations of the NAS-Bench-201 cell {PARENT} "
          f"({args.channels} channels; parent trained {args.parent_epochs} epochs), each trained 1 epoch from scratch, "
          f"with inherited weights, and with inherited weights and optimizer state; {settings.optimizer} lr "
          f"{settings.lr:g}, batch {settings.batch_size}, seed {args.seed}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    t0 = time.perf_counter()
    results = [run_task(data, settings, children=args.children, parent_epochs=args.parent_epochs, seed=args.seed,
                        channels=args.channels) for data in tasks(args.samples, args.seed)]
    table = [["task", "parent", "inherited share", "inherited, untrained", "scratch", "inherited",
              "inherited + optimizer", "better than scratch", "s/epoch scratch", "s/epoch inherited"]]
    for task in results:
        s = summary(task)
        n = len(task["children"])
        table.append([f"{task['dataset']} ({task['train']:,} train)", f"{task['parent_acc']:.3f}",
                      f"{s['fraction']:.0%}", f"{s['before']:.3f}", f"{s['scratch']:.3f} ± {s['scratch_sd']:.3f}",
                      f"{s['inherited']:.3f} ± {s['inherited_sd']:.3f}",
                      f"{s['inherited_opt']:.3f} ± {s['inherited_opt_sd']:.3f}",
                      f"{s['wins']}/{n}, {s['wins_opt']}/{n}",
                      f"{s['scratch_seconds']:.2f}", f"{s['inherited_seconds']:.2f}"])
        task["summary"] = s
    print(text_table(table, rule=True))
    ms = 1000 * statistics.fmean(t["summary"]["inherit_seconds"] for t in results)
    print(f"validation accuracy after 1 epoch, mean ± sd over {args.children} children per task (parent: after "
          f"{args.parent_epochs}); inheriting took {ms:.0f} ms per child (build, copy, evaluate); "
          f"{time.perf_counter() - t0:.1f} s in all")
    write_json(args.json, {"seed": args.seed, "channels": args.channels, "tasks": results})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--children", type=int, default=6, help="mutated children of the parent per task (default 6)")
    p.add_argument("--parent-epochs", type=int, default=3, help="epochs the parent trains (default 3)")
    p.add_argument("--samples", type=int, default=600, help="images in the 32x32 task (default 600)")
    p.add_argument("--channels", type=int, default=8, help="stem channels of the cell network (default 8)")
    p.add_argument("--quick", action="store_true", help="2 children, a 1-epoch parent, 200 images" + QUICK_WINS)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: on a busy machine two "
                   "threads of small convolutions ran 20x slower)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures as JSON")

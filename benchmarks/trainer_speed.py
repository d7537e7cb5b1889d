"""``nas bench train``: our trainer against a bare PyTorch loop, and trials packed on one GPU.

How fast the platform trains one candidate, against a bare PyTorch loop, and how much packing several trials on
one GPU raises the aggregate throughput.

One command prints, side by side:

1. per device (the CPU; CUDA where present) and per model: samples per second of a *bare loop* (the
   minimal loop a user writes, :func:`nas_benchmarks.bare.bare_loop`: data moved to the device once, ``randperm``
   + index slicing, fused Adam, a validation pass per epoch) and of :class:`nas.train.runner.TrialRunner` on the
   same model, data, batch size, optimizer, learning rate and epochs, like-for-like: the same seed, initial
   weights, batches, augmentation draws and normalisation (:mod:`nas_benchmarks.bare` lists them; the largest
   difference of the final weights is printed: 0 on the CPU); interleaved ``--repeats`` times after a
   warm-up round, medians reported, and their ratio (ours / bare; > 1 is faster);
2. on a GPU only: the aggregate samples per second of 1, 2, 4 and 8 trials packed on it through
   :class:`nas.engine.ray_pool.RayExecutor` with ``gpus_per_trial = 1/k`` (Ray fractional GPUs).

Samples/s = training samples seen (training split x epochs) / wall time of each side's loop (the first
training forward to the end of the last validation); start-up (building the model and optimizer; the bare
loop's channel statistics) and end (ours: the checkpoint) are timed apart on both sides, by the same forward
hooks, and the whole trial's ratio is printed too. On CPU the loop ratio is also given by CPU time, which
other processes on a shared machine disturb less. Speed is printed, never asserted.
Models: by default a mid-size NAS-Bench-201 cell (Dong & Yang 2020) and a two-block CNN of the macro space.
``--dataset synthetic-32`` (3x32x32 float images, ``--samples`` of them) gives the GPU real work;
``--dataset images-32`` is the same size as uint8 images (:mod:`nas.train.synthetic`), kept as uint8 on the
device and normalised per channel on the fly by both loops.

``--augment`` adds the augmented path: random crop (4 pixels of padding), horizontal flip and 8x8 cutout on
the device, in both loops; the bare loop calls the same batched ops (:mod:`nas.train.augment`, plain torch:
torchvision does not load with our torch build), so the ratio measures the trainer around them.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
from typing import Any

import numpy as np
import torch

from nas.cli.common import file_arg
from nas.core.space import SearchSpace
from nas.core.types import Arch, Trial
from nas.train.augment import Augment
from nas.train.data import Dataset, load_dataset
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings

from . import add_experiment
from .bare import Marks, Phases, bare_loop, max_weight_diff
from .gpu_packing import print_packing
from .harness import at_least, text_table, write_json

#: The default models: a mid-size nb201 cell (3 convolutions, a pool and two skips) and a 2-block CNN.
DEFAULT_ARCHS = {
    "nb201": "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|",
    "macro": "depth=2,width_0=32,width_1=64,width_2=64,kernel_0=3,kernel_1=3,kernel_2=3,activation=relu,"
             "norm=batch,dropout=0.0",
}
PACKS = (1, 2, 4, 8)
AUGMENT = Augment(crop_padding=4, flip=True, cutout=8)


def bench_dataset(name: str, *, samples: int = 10_000, seed: int = 0) -> Dataset:
    """A dataset by name; ``synthetic-32`` is this bench's larger image task (3x32x32, 10 classes);
    ``images-32`` the uint8 image task of :mod:`nas.train.synthetic`."""
    if name == "images-32":
        from nas.train.synthetic import synthetic_images

        return Dataset.from_arrays(*synthetic_images(samples, seed=seed), seed=seed, name="images-32")
    if name != "synthetic-32":
        return load_dataset(name, seed=seed)
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(10, 3, 32, 32)).astype(np.float32)
    y = rng.integers(10, size=samples)
    x = centers[y] + rng.normal(scale=2.0, size=(samples, 3, 32, 32)).astype(np.float32)
    return Dataset.from_arrays(x, y, seed=seed, name="synthetic-32")


def compare(space: SearchSpace, arch: Arch, dataset: Dataset, device: str, *, epochs: int, batch_size: int,
            lr: float, repeats: int, amp: bool, seed: int = 0, augment: Augment | None = None) -> dict[str, Any]:
    """Bare loop and TrialRunner, interleaved ``repeats`` times after one warm-up round of each; samples/s over
    each side's loop (training + validation), start-up and end apart; the last round's accuracies and weights."""
    aug = augment or Augment()
    settings = TrainSettings(epochs=epochs, batch_size=batch_size, lr=lr, device=device, amp=amp, seed=seed,
                             crop_padding=aug.crop_padding, flip=aug.flip, cutout=aug.cutout)
    trainer = TrialRunner(dataset, settings)  # puts the data on the device, as the bare loop's copy below
    side = trainer.side
    assert side is not None
    dev = torch.device(device)
    tensors = {k: torch.from_numpy(np.asarray(getattr(dataset, k))).to(dev)
               for k in ("x_train", "y_train", "x_val", "y_val")}
    ours_marks, bare_marks = Marks(dev), Marks(dev)
    build = side.build

    def marked_build(arch: Arch, space: SearchSpace) -> tuple[torch.nn.Module, int]:
        model, n_params = build(arch, space)
        ours_marks.attach(model)
        return model, n_params

    side.build = marked_build  # type: ignore[method-assign]  # the same forward hooks as the bare loop's
    samples = side.feed.train_samples(batch_size) * epochs
    trial_seed = seed * 1_000_003  # the trainer's per-trial seed for trial 0
    bare_ph: list[Phases] = []
    ours_ph: list[Phases] = []
    bare_acc, ours_acc, diff = 0.0, 0.0, float("nan")

    def run_bare() -> tuple[float, dict[str, torch.Tensor], Phases]:
        acc, weights = bare_loop(space, arch, tensors, dataset.task, epochs=epochs, batch_size=batch_size, lr=lr,
                                 seed=trial_seed, augment=augment, amp=bool(side.autocast_on),
                                 channels_last=side.memory_format == torch.channels_last, marks=bare_marks)
        return acc, weights, bare_marks.stop()

    def run_ours() -> tuple[Any, bytes | None, Phases]:
        ours_marks.start()
        result, ckpt = trainer.run(Trial(0, arch, epochs=epochs), space, None)
        return result, ckpt, ours_marks.stop()

    for r in range(repeats + 1):
        if r % 2:  # ours first in every other round: an order effect (caches, the scheduler) cancels out
            result, ckpt, o = run_ours()
            bare_acc, bare_w, b = run_bare()
        else:
            bare_acc, bare_w, b = run_bare()
            result, ckpt, o = run_ours()
        if not result.ok or ckpt is None:
            raise RuntimeError(f"TrialRunner failed on {space.format(arch)}: {result.error}")
        ours_acc = float(result.score or 0.0)
        diff = max_weight_diff(bare_w, torch.load(io.BytesIO(ckpt), weights_only=True)["model"])
        if r:  # round 0 warms up both (kernels, allocator, autotuning)
            bare_ph.append(b)
            ours_ph.append(o)

    def med(ph: list[Phases], field: str) -> float:
        return statistics.median(getattr(p, field) for p in ph)

    bare, ours = samples / med(bare_ph, "loop_wall"), samples / med(ours_ph, "loop_wall")
    params = sum(p.numel() for p in space.build(arch, dataset.task).parameters())
    phases = {side: {f: med(ph, f) for f in Phases.__dataclass_fields__} for side, ph in
              (("bare", bare_ph), ("ours", ours_ph))}
    return {"device": device, "space": space.registered_name or type(space).__name__, "params": params,
            "bare": bare, "ours": ours, "ratio": ours / bare, "bare_acc": bare_acc, "ours_acc": ours_acc,
            "max_weight_diff": diff, "samples_per_trial": samples, "phases": phases,
            "bare_all": [samples / p.loop_wall for p in bare_ph], "ours_all": [samples / p.loop_wall for p in ours_ph],
            "cpu_time_ratio": med(bare_ph, "loop_cpu") / max(med(ours_ph, "loop_cpu"), 1e-9),
            "trial_ratio": sum(phases["bare"][f] for f in ("start_wall", "loop_wall", "end_wall"))
            / sum(phases["ours"][f] for f in ("start_wall", "loop_wall", "end_wall")),
            "amp": bool(side.autocast_on), "augment": dataclasses.asdict(aug) if aug.active else None}


def handler(args: argparse.Namespace) -> int:
    at_least(1, epochs=args.epochs, repeats=args.repeats, batch_size=args.batch_size, pack_trials=args.pack_trials)
    at_least(20, samples=args.samples)
    try:
        packs = [int(v) for v in str(args.pack).split(",") if v.strip()]
    except ValueError:
        packs = []
    if not packs or any(k < 1 for k in packs):
        raise ValueError(f"--pack must be comma-separated trial counts >= 1 (e.g. 1,2,4,8), got {args.pack!r}")
    from nas.api import resolve_space

    spaces = args.space or list(DEFAULT_ARCHS)
    if args.arch and len(spaces) != 1:
        raise ValueError("--arch needs exactly one --space")
    cases = []
    for spec in spaces:
        space = resolve_space(spec)
        text = args.arch or DEFAULT_ARCHS.get(spec)
        if text is None:
            raise ValueError(f"space {spec!r} has no default architecture here: give one with --arch")
        cases.append((space, space.parse(text)))
    if args.threads is not None:
        at_least(1, threads=args.threads)
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        raise ValueError("--device cuda was asked for, but torch sees no CUDA device")
    devices = {"auto": ["cpu"] + (["cuda"] if cuda else []), "cpu": ["cpu"], "cuda": ["cuda"]}[args.device]
    dataset = bench_dataset(args.dataset, samples=args.samples)
    augment = AUGMENT if args.augment else None
    if augment is not None and len(dataset.task.input_shape) != 3:
        raise ValueError(f"--augment needs image inputs; {dataset.name} has shape {dataset.task.input_shape}")
    shape = "x".join(map(str, dataset.task.input_shape))
    gpu = f", GPU {torch.cuda.get_device_name()}" if cuda else ", no GPU"
    print(f"nas bench train: {dataset.name} ({len(dataset.x_train):,} train / {len(dataset.x_val):,} val, {shape}), "
          f"{args.epochs} epochs, batch {args.batch_size}, adam lr {args.lr:g}, median of {args.repeats}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads{gpu}"
          + (f"; augmented: crop pad {AUGMENT.crop_padding}, flip, cutout {AUGMENT.cutout} in both loops"
             if augment else ""))
    out: dict[str, Any] = {"dataset": dataset.name, "epochs": args.epochs, "batch_size": args.batch_size,
                           "threads": torch.get_num_threads(), "compare": [], "packing": []}
    rows = [["device", "space", "params", "bare loop samples/s", "nas trainer samples/s", "ours/bare",
             "by CPU time", "start-up ms bare/ours", "end ms bare/ours", "whole trial", "val acc bare/ours",
             "max |dw|"]]
    for device in devices:
        for space, arch in cases:
            c = compare(space, arch, dataset, device, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        repeats=args.repeats, amp=args.amp, augment=augment)
            out["compare"].append(c)
            b, o = c["phases"]["bare"], c["phases"]["ours"]
            rows.append([device + (" bf16" if c["amp"] else ""), c["space"], f"{c['params']:,}", f"{c['bare']:,.0f}",
                         f"{c['ours']:,.0f}", f"{c['ratio']:.3f}",
                         f"{c['cpu_time_ratio']:.3f}" if device == "cpu" else "-",
                         f"{b['start_wall'] * 1e3:.0f}/{o['start_wall'] * 1e3:.0f}",
                         f"{b['end_wall'] * 1e3:.0f}/{o['end_wall'] * 1e3:.0f}", f"{c['trial_ratio']:.3f}",
                         f"{c['bare_acc']:.3f}/{c['ours_acc']:.3f}", f"{c['max_weight_diff']:.2g}"])
            print(text_table(rows).splitlines()[-1] if len(rows) > 2 else text_table(rows), flush=True)
    print("samples/s over each side's loop (training + validation every epoch); ours/bare > 1: ours faster; by CPU "
          "time: the same ratio from process CPU seconds; start-up (model, optimizer; the bare loop also computes "
          "the channel statistics) and end (ours: the checkpoint) shown apart; whole trial: all three; max |dw|: "
          "largest difference of the final weights (0: the same training, step for step)")
    if "cuda" not in devices:
        print("packing trials on one GPU needs a GPU: skipped" + ("" if cuda else " (torch sees no CUDA device)"))
    else:
        out["packing"] = print_packing(*cases[0], dataset, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                       packs=packs, trials_per_worker=args.pack_trials, amp=args.amp,
                                       address=args.address)
    write_json(args.json, out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--space", action="append", help="nb201, macro or module:attr (repeatable; default: nb201 "
                   "and macro)")
    p.add_argument("--arch", help="the architecture, in the space's format (default: a fixed mid-size one)")
    p.add_argument("--dataset", default="digits", help="digits (default), synthetic, synthetic-32, images-32 (uint8) "
                   "or a .npz file")
    p.add_argument("--augment", action="store_true", help="random crop, flip and cutout on the device in both loops")
    p.add_argument("--samples", type=int, default=10_000, help="images in synthetic-32 (default 10000)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per trial (default 3)")
    p.add_argument("--batch-size", type=int, default=64, help="minibatch size (default 64)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (default 0.01)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of each, after a warm-up (default 3)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: the CPU, and CUDA when present (default)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own)")
    p.add_argument("--no-amp", dest="amp", action="store_false", help="no bf16 autocast in our trainer on GPUs")
    p.add_argument("--pack", default=",".join(map(str, PACKS)), help="trials packed on one GPU (default 1,2,4,8)")
    p.add_argument("--pack-trials", type=int, default=2, help="timed trials per packed actor (default 2)")
    p.add_argument("--address", help="Ray cluster for the packing table (default: start a local one)")
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures as JSON")

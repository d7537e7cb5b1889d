"""``nas supernet train`` and ``nas retrain``: the command line of the two-stage search (:mod:`nas.oneshot`)."""

from __future__ import annotations

import argparse
import sys

from nas.cli.common import nonempty, path_arg, seed_arg
from nas.oneshot import SupernetFailed, retrain, train_supernet
from nas.train.settings import TrainSettings


def cmd_train(args: argparse.Namespace) -> int:
    settings = TrainSettings(lr=args.lr, batch_size=args.batch_size, optimizer=args.optimizer,
                             schedule=args.schedule, seed=args.seed, device=args.device, threads=args.threads)
    try:
        df = train_supernet(args.space, args.dataset, args.run_dir, epochs=args.epochs, sampling=args.sampling,
                            settings=settings, seed=args.seed, resume=args.resume, progress=not args.quiet,
                            executor=args.executor, trial_workers=args.trial_workers, address=args.address,
                            cpus_per_worker=args.cpus_per_worker)
    except SupernetFailed as e:  # (its checkpoint of the last epoch stays: --resume continues from it)
        print(f"nas supernet train: error ({e.kind.value}): {e}; continue with --resume", file=sys.stderr)
        return 1
    last = df.iloc[-1]
    print(f"supernet trained {int(last['epoch'])} epochs in {df.attrs['run_dir']} (last epoch: train loss "
          f"{last['train_loss']:.4f}, train accuracy of its paths {last['train_acc']:.4f}); search it with: "
          f"nas search --space {args.space} --dataset {args.dataset} --supernet {df.attrs['run_dir']}")
    return 0


def cmd_retrain(args: argparse.Namespace) -> int:
    df = retrain(args.run_dir, top=args.top, epochs=args.epochs, out_dir=args.out, out_flag="--out",
                 executor=args.executor, workers=args.workers)
    cols = ["trial_id", "arch", "state", "score"]
    print(df[cols].sort_values("score", ascending=False).to_string(index=False))
    if not (df["state"] == "COMPLETE").any():
        print(f"no trial completed; see the errors with: nas results {df.attrs['run_dir']}")
    print(f"retrained in {df.attrs['run_dir']}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("supernet", help="train a weight-sharing supernet (then: nas search --supernet DIR)",
                           description=(__doc__ or "").split("\n\n")[0])
    gsub = group.add_subparsers(dest="supernet_command", required=True, metavar="COMMAND")
    p = gsub.add_parser("train", help="single-path one-shot training of a space's supernet")
    p.add_argument("--space", default="macro", help="a space with a supernet: macro or nb201 (default: macro)")
    p.add_argument("--dataset", default="digits", help="digits, synthetic, a .npz file, cifar10:DIR, ...")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--sampling", choices=["uniform", "fair", "sandwich"], default="uniform",
                   help="paths per step: one uniform (SPOS), fair (FairNAS) or sandwich (default: uniform)")
    p.add_argument("--run-dir", type=path_arg, help="the run directory (default: runs/<time>-supernet-<space>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], default="adam")
    p.add_argument("--schedule", choices=["constant", "cosine", "step"], default="cosine")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--seed", type=seed_arg, default=0)
    p.add_argument("--executor", choices=["ray", "inprocess"], default="ray",
                   help="ray: on a Ray actor (default); inprocess: in this process")
    p.add_argument("--trial-workers", type=int, default=1, metavar="N",
                   help="Ray actors training the supernet data-parallel (torch DDP), --batch-size rows each per step")
    p.add_argument("--cpus-per-worker", type=float, default=1.0,
                   help="CPUs of each Ray actor (its torch threads, unless --threads; default 1)")
    p.add_argument("--address", type=nonempty,
                   help="the Ray cluster to join (default: RAY_ADDRESS, else a private local one)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_train)
    p = sub.add_parser("retrain", help="train a search's best architectures standalone, from scratch")
    p.add_argument("run_dir", metavar="RUN_DIR", type=nonempty)
    p.add_argument("--top", type=int, default=1, help="how many (several objectives: the Pareto front first)")
    p.add_argument("--epochs", type=int, default=None, help="epochs each (default: the search's)")
    p.add_argument("--out", type=path_arg, help="the retraining's run directory (default: RUN_DIR/retrain)")
    p.add_argument("--executor", choices=["ray", "inprocess"], default="ray", help="ray (default) or inprocess")
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(handler=cmd_retrain)


__all__ = ["register"]

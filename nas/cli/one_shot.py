"""``nas supernet train`` and ``nas retrain``: the command line of the two-stage search (:mod:`nas.oneshot`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from shlex import quote
from typing import Any

from nas.cli.common import nonempty, path_arg, seed_arg
from nas.core.spec import space_from_spec
from nas.oneshot import SupernetFailed, default_supernet_dir, retrain, train_supernet
from nas.run.supernet_store import read_run, supernet_status
from nas.train.settings import TRIAL_HPARAMS, TrainSettings

#: what ``nas supernet train`` trains with where neither a flag nor, with --resume, the run says
DEFAULTS = {"space": "macro", "dataset": "digits", "epochs": 10, "sampling": "uniform", "lr": 1e-2, "batch_size": 64,
            "optimizer": "adam", "schedule": "cosine", "seed": 0, "trial_workers": 1}
HPARAM_FLAGS = ("lr", "batch_size", "optimizer", "schedule")  # (the hyperparameters the command line sets)


def cmd_train(args: argparse.Namespace) -> int:
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    recorded: dict[str, Any] = {}
    if args.resume:
        if args.run_dir is None:
            raise ValueError("--resume needs --run-dir, the supernet run to continue")
        recorded = _recorded(Path(args.run_dir))
    chosen = {**DEFAULTS, **recorded, **given}  # (a flag that differs from the run is refused by the resume)
    hparams = {k: v for k, v in recorded.get("hparams", {}).items() if k in TRIAL_HPARAMS}
    settings = TrainSettings(**{**hparams, **{k: chosen[k] for k in HPARAM_FLAGS}},
                             seed=chosen["seed"], device=args.device, threads=args.threads)
    space = space_from_spec(chosen["space"])
    run_dir = args.run_dir or str(default_supernet_dir(space))
    try:
        df = train_supernet(space, chosen["dataset"], run_dir, epochs=chosen["epochs"], sampling=chosen["sampling"],
                            settings=settings, seed=chosen["seed"], resume=args.resume, progress=not args.quiet,
                            executor=args.executor, trial_workers=chosen["trial_workers"], address=args.address,
                            cpus_per_worker=args.cpus_per_worker)
    except SupernetFailed as e:  # (its checkpoint of the last epoch stays: --resume continues from it)
        print(f"nas supernet train: error ({e.kind.value}): {e}; continue with: nas supernet train --resume "
              f"--run-dir {run_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        status = supernet_status(run_dir)  # (None: a new run stopped before its first epoch is taken back)
        kept = (f"stopped after epoch {status['epochs_done']} of {status['epochs']}; continue with: nas supernet "
                f"train --resume --run-dir {run_dir}") if status else "stopped before its first epoch; nothing kept"
        print(f"\nnas supernet train: interrupted: {kept}", file=sys.stderr)
        return 130
    last = df.iloc[-1]
    print(f"supernet trained {int(last['epoch'])} epochs in {df.attrs['run_dir']} (last epoch: train loss "
          f"{last['train_loss']:.4f}, train accuracy of its paths {last['train_acc']:.4f}); search it with: "
          f"nas search --space {space.spec()['class']} --dataset {chosen['dataset']} --supernet {df.attrs['run_dir']}")
    return 0


def _recorded(run_dir: Path) -> dict[str, Any]:
    """What the supernet run in ``run_dir`` was trained with, as :data:`DEFAULTS` names it (its space as the
    recorded spec, with its arguments), and its ``hparams``: a resume needs no flag repeated."""
    cfg = read_run(run_dir)
    hparams: dict[str, Any] = cfg["hparams"] if isinstance(cfg.get("hparams"), dict) else {}
    out = {"space": cfg.get("space_spec"), "dataset": cfg.get("dataset"), "epochs": cfg.get("epochs"),
           "sampling": cfg.get("sampling"), "seed": cfg.get("seed"), "trial_workers": cfg.get("ranks"),
           **{k: hparams.get(k) for k in HPARAM_FLAGS}}
    return {"hparams": hparams, **{k: v for k, v in out.items() if v is not None}}


def cmd_retrain(args: argparse.Namespace) -> int:
    df = retrain(args.run_dir, top=args.top, epochs=args.epochs, out_dir=args.out, out_flag="--out",
                 executor=args.executor, workers=args.workers)
    cols = ["trial_id", "search_trial", "arch", "state", "score"]
    print(df[cols].sort_values("score", ascending=False, kind="stable").to_string(index=False))
    if not (df["state"] == "COMPLETE").any():
        print(f"no trial completed; see the errors with: nas results {quote(str(df.attrs['run_dir']))}")
    print(f"retrained in {df.attrs['run_dir']}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("supernet", help="train a weight-sharing supernet (then: nas search --supernet DIR)",
                           description=(__doc__ or "").split("\n\n")[0])
    gsub = group.add_subparsers(dest="supernet_command", required=True, metavar="COMMAND")
    p = gsub.add_parser("train", help="single-path one-shot training of a space's supernet")
    p.add_argument("--space", help="a space with a supernet: macro or nb201 (default: macro)")
    p.add_argument("--dataset", help="digits, synthetic, a .npz file, cifar10:DIR, ... (default: digits)")
    p.add_argument("--epochs", type=int, help="epochs in all (default: 10; a resume may raise them)")
    p.add_argument("--sampling", choices=["uniform", "fair", "sandwich"],
                   help="paths per step: one uniform (SPOS), fair (FairNAS) or sandwich (default: uniform)")
    p.add_argument("--run-dir", type=path_arg, help="the run directory (default: runs/<time>-supernet-<space>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir with what it was trained with (no flag repeated)")
    p.add_argument("--lr", type=float, help="default: 0.01")
    p.add_argument("--batch-size", type=int, help="default: 64")
    p.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], help="default: adam")
    p.add_argument("--schedule", choices=["constant", "cosine", "step"], help="default: cosine")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--seed", type=seed_arg, help="default: 0")
    p.add_argument("--executor", choices=["ray", "inprocess"], default="ray",
                   help="ray: on a Ray actor (default); inprocess: in this process")
    p.add_argument("--trial-workers", type=int, metavar="N",
                   help="Ray actors training the supernet data-parallel (torch DDP), --batch-size rows each per step "
                   "(default: 1)")
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

"""``nas proxies``: zero-cost proxies (:mod:`nas.train.proxies`) of a run's finished trials, or of a space's sampled
architectures, computed in this process at initialisation (nothing trains).

- ``nas proxies RUN_DIR``: each proxy of every finished trial's architecture, built for the run's data, and its
  Spearman's rho and Kendall's tau (scipy) against the trials' scores: does the proxy rank this run's candidates as
  training did? ``params`` is the baseline a proxy must beat.
- ``nas proxies RUN --sample N``: the same over a seeded sample of N of them (default at most 1,000).
- ``nas proxies --space S --sample N``: the proxies of N architectures sampled from space S (seeded), one row each.

Both print each proxy's seconds per cell, computing that proxy alone on this CPU (one torch thread). The proxies that
need data see one minibatch of ``--batch`` training examples of the run's dataset (or ``--dataset``), as the
search's workers feed them (uint8 images normalised per channel, the inputs a ``--proxy-screen`` scores). A run
directory is only read: a run whose space is not a registered one is refused (nothing a run names is imported).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from nas.cli.common import UsageError, nonempty, parse_options, seed_arg

ALL = "synflow,snip,grad_norm,jacob_cov,naswot,params"


def _minibatch(data: Any, size: int, seed: int) -> tuple[Any, Any]:
    """``size`` training examples of ``data`` (seeded choice), prepared as a search's workers feed them to a model
    (:func:`nas.train.proxies.minibatch`). (They were only scaled to [0, 1]: a threshold read off ``nas proxies`` was
    on another scale than the screen it was meant for.)"""
    from nas.train.proxies import minibatch

    return minibatch(data.x_train, data.y_train, size, seed)


def _timed(fn: Any, n: int) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) / max(n, 1)


def _finished(run_dir: str) -> tuple[Any, Any, list[Any], list[float]]:
    """The run's config, its (registered) space, and the architecture and score of each scored trial."""
    from nas.core.spec import space_from_spec
    from nas.run.reader import read_journal
    from nas.run.store import read_config

    cfg = read_config(Path(run_dir))
    try:
        space = space_from_spec(cfg.search.space_spec(), allow_import=False)
    except ValueError as e:
        raise UsageError(f"cannot build the space of {run_dir!r} here ({e})") from None
    pairs = [(t.arch, float(r.score)) for t, r in read_journal(run_dir)
             if r.ok and r.score is not None and math.isfinite(r.score)]
    if len(pairs) < 3:
        raise UsageError(f"run {run_dir!r} has {len(pairs)} scored trial(s); ranking proxies needs at least 3")
    return cfg, space, [a for a, _ in pairs], [s for _, s in pairs]


#: the most architectures ``--sample`` scores (each builds a network and runs the proxies on it)
MAX_SAMPLE = 100_000
#: a run's scored trials ranked at most, without ``--sample`` (about 0.5 s each: a 100,000-trial run took 13 hours)
RUN_SAMPLE = 1_000


def _data(name: str | None, seed: int) -> Any:
    from nas.train.data import load_dataset

    if name is None:
        raise UsageError("this run trained on no dataset (dataset none): give one with --dataset to build its cells")
    return load_dataset(name, seed=seed)


def cmd_proxies(args: argparse.Namespace) -> int:
    import torch

    from nas.train.proxies import check_names, rank_against, score_archs

    names = check_names(n.strip() for n in args.proxies.split(",") if n.strip())
    if args.batch < 2:
        raise UsageError(f"--batch must be at least 2 (the proxies compare examples), got {args.batch}")
    if (args.run_dir is None) == (args.space is None):
        raise UsageError("give a run directory, or --space S --sample N (not both)")
    torch.set_num_threads(1)  # tiny work in the driver: one thread, and s/cell comparable across machines
    if args.run_dir is not None:
        if args.space_option:
            raise UsageError("--space-option goes with --space, not with a run directory")
        if args.sample is not None and not 3 <= args.sample <= MAX_SAMPLE:
            raise UsageError(f"--sample with a run directory ranks N of its scored trials, N from 3 to "
                             f"{MAX_SAMPLE:,}; got {args.sample}")
        cfg, space, archs, scores = _finished(args.run_dir)
        of = len(archs)
        if of > (n := args.sample or RUN_SAMPLE):  # (a seeded sample, so the figures can be had again)
            import numpy as np

            keep = np.sort(np.random.default_rng(args.seed).choice(of, size=n, replace=False))
            archs, scores = [archs[i] for i in keep], [scores[i] for i in keep]
        data = _data(args.dataset or cfg.train.dataset, cfg.search.seed)
        x, y = _minibatch(data, args.batch, args.seed)
        sampled = f"a seeded sample of {len(archs):,} of the {of:,} " if len(archs) < of else f"{of} "
        print(f"{sampled}scored trials of {args.run_dir} ({cfg.search.space}, objective "
              f"{cfg.search.objectives[0]}); proxies at initialisation on {data.name}, a minibatch of {len(x)}")
        print(f"{'proxy':<10} {'spearman':>9} {'kendall':>8} {'s/cell':>8}")
        for name in names:
            ranks, sec = _timed(lambda n=name: rank_against(space, archs, scores, data.task, names=[n], x=x, y=y,
                                                            seed=args.seed), len(archs))
            rho, tau = ranks[name]
            print(f"{name:<10} {rho:>9.3f} {tau:>8.3f} {sec:>8.4f}")
        return 0
    import numpy as np

    from nas.core.spec import space_from_spec

    space = space_from_spec(args.space, parse_options(args.space_option, "--space-option"))  # (a bad name first)
    if args.sample is None or not 1 <= args.sample <= MAX_SAMPLE:  # (2**70: a list of that many, memory to the end)
        raise UsageError(f"--space needs --sample N with N from 1 to {MAX_SAMPLE:,}, got {args.sample}")
    data = _data(args.dataset or "digits", args.seed)
    x, y = _minibatch(data, args.batch, args.seed)
    rng = np.random.default_rng(args.seed)
    archs = [space.sample(rng) for _ in range(args.sample)]
    values, seconds = {}, {}
    for name in names:
        scored, seconds[name] = _timed(lambda n=name: score_archs(space, archs, data.task, names=[n], x=x, y=y,
                                                                  seed=args.seed), len(archs))
        values[name] = scored[name]
    print(f"{len(archs)} architectures of {type(space).__name__} (seed {args.seed}); proxies at initialisation on "
          f"{data.name}, a minibatch of {len(x)}")
    width = max(12, *(len(space.format(a)) for a in archs))
    print(f"{'arch':<{width}} " + " ".join(f"{n:>12}" for n in names))
    for i, arch in enumerate(archs):
        print(f"{space.format(arch):<{width}} " + " ".join(f"{values[n][i]:>12.4g}" for n in names))
    print(f"{'s/cell':<{width}} " + " ".join(f"{seconds[n]:>12.4f}" for n in names))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("proxies", help="zero-cost proxies: their rank correlation with a run's trials, or of samples",
                       description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", type=nonempty,
                   help="a run whose scored trials the proxies are ranked against")
    p.add_argument("--space", help="instead of a run: a space (registered name) whose samples are scored")
    p.add_argument("--space-option", action="append", default=[], metavar="KEY=VALUE",
                   help="the space's constructor arguments (with --space; repeatable)")
    p.add_argument("--sample", type=int, help=f"architectures sampled from --space; with a run directory, its "
                   f"scored trials ranked (a seeded sample; default at most {RUN_SAMPLE:,})")
    p.add_argument("--proxies", default=ALL, help=f"comma-separated (default: {ALL})")
    p.add_argument("--dataset", help="the data the cells are built for and the minibatch comes from (default: the "
                   "run's; with --space: digits)")
    p.add_argument("--batch", type=int, default=64, help="examples in the minibatch (default 64)")
    p.add_argument("--seed", type=seed_arg, default=0,
                   help="seed of the sample, the minibatch and the weights (default 0)")
    p.set_defaults(handler=cmd_proxies)


__all__ = ["register"]

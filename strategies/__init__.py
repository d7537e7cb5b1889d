"""Built-in search strategies, one file each, registered by name (``nas strategies`` lists them)."""

from nas.strategies import evolution, local, optuna_sampler, pbt, predictor, random, rl  # noqa: F401  (importing registers them)

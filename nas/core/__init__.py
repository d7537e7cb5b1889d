"""Core types: trials, results, spaces, strategies, schedulers, objectives, registries."""

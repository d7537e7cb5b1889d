"""Benchmarks runnable from the CLI (`nas bench ...`)."""

"""Schedulers: pure, seeded objects that decide on intermediate results (ASHA, Hyperband, median),
registered by name (``nas.core.registry.schedulers``), one file each."""

from nas.schedulers import asha, hyperband, median, none  # noqa: F401  (importing registers them)

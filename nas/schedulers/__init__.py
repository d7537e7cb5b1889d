"""Schedulers: pure, seeded objects that decide on intermediate results (ASHA, Hyperband, median),
registered by name (``nas.core.registry.schedulers``), one file each; the registry imports each when its name is
first looked up."""

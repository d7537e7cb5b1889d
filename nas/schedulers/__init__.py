"""Schedulers: pure, seeded objects that decide on intermediate results (ASHA, Hyperband, median)."""

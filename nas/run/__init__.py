"""The run directory: its one owner (layout, lock, journal, snapshots, checkpoints, best, status)."""

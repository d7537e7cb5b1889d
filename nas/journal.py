"""Compatibility names for the run directory, now owned by :mod:`nas.run` (the journal's format is
:mod:`nas.run.journal`; reading is :mod:`nas.run.reader`; writing is :class:`nas.run.store.RunStore`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nas.run.config import FORMAT_VERSION
from nas.run.files import atomic_write
from nas.run.journal import JournalWriter, cut_torn_tail
from nas.run.reader import COLUMNS, read_journal, results_frame
from nas.run.store import read_config

__all__ = ["COLUMNS", "FORMAT_VERSION", "Journal", "RunDir", "atomic_write", "cut_torn_tail", "read_journal",
           "results_frame"]


class RunDir:
    """A run directory's paths (read-only helper)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @property
    def trials_path(self) -> Path:
        return self.path / "trials.jsonl"

    @property
    def config_path(self) -> Path:
        return self.path / "run.json"

    def config(self) -> dict[str, Any]:
        return read_config(self.path)


class Journal(JournalWriter):
    """A bare journal on ``run_dir`` (no lock, no snapshots: for benchmarks and tests of the loop)."""

    def __init__(self, run_dir: RunDir) -> None:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        super().__init__(run_dir.trials_path)

"""The soak: an ASHA-promotion search and a PBT search on a real Ray cluster, each SIGKILLed five times at
random-but-seeded points (after the k-th journal record; tests/crash_child.py) and resumed after each kill, end
complete: the budget finished, every trial id once, each run of a trial ended once. Ray's timing makes the order of
results vary from run to run, so the check is completeness, not equality with another run (tests/test_crashes.py
checks that on the deterministic in-process executor)."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nas.run.journal import latest_results, read_records

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import crash_child  # noqa: E402  (the search each killed process runs, and how it is started)

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SEARCHES = {
    "asha-promotion": {"strategy": "evolution", "options": {"population": 6, "sample_size": 3}, "scheduler": "asha",
                       "scheduler_options": {"eta": 3, "variant": "promotion"}, "budget": 16, "epochs": 9},
    "pbt": {"strategy": "pbt", "options": {"population": 3, "quantile": 0.34}, "scheduler": "none", "budget": 12,
            "epochs": 3},
}


def child(spec: dict) -> subprocess.CompletedProcess:
    """The search of ``spec`` in a process of its own (forked from a server that has imported it: crash_child.launch):
    a Ray driver joined to the session's cluster, whose trainer actors die with it when it is SIGKILLed."""
    return crash_child.launch(spec, Path(spec["run_dir"]).parent / "logs")


@pytest.mark.parametrize("name", list(SEARCHES))
def test_five_random_kills_on_ray_end_complete(ray_local, tmp_path, name):
    address = ray_local.get_runtime_context().gcs_address
    spec = {**SEARCHES[name], "executor": "ray", "workers": 2, "address": address, "run_dir": str(tmp_path / "run")}
    rng = np.random.default_rng(2026)
    journal = tmp_path / "run" / "trials.jsonl"
    for i in range(5):
        records = journal.read_bytes().count(b"\n") if journal.exists() else 0
        kill = {"records": records + int(rng.integers(3, 12))}
        proc = child({**spec, "resume": i > 0, "kill": kill})
        assert proc.returncode == -9, f"kill {i} ({kill}) did not land: {proc.returncode} {proc.stderr[-3000:]}"
    proc = child({**spec, "resume": True})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = list(read_records(journal))
    finished = latest_results(records, journal)  # (a second result of one run of a trial: an error here)
    assert sorted(finished) == list(range(spec["budget"]))  # complete, every id once
    results = collections.Counter(r.trial.trial_id for r in records if r.kind == "result")
    runs = collections.Counter(r.trial.trial_id for r in records if r.kind == "submit"
                               and r.trial.checkpoint_from == r.trial.trial_id)
    assert all(results[t] <= 1 + runs[t] for t in finished)  # each run of a trial (a promotion's) ended once

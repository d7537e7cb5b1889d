"""A run directory written before the layered restructuring (tests/fixtures/run_format2, main at c00758a) still
resumes from the command line: the journal's finished trials stand unchanged, the promotions replay, and the run
goes on to its raised budget with every trial id finished once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nas.cli import main
from nas.core.types import Outcome, Result

FIXTURE = Path(__file__).parent / "fixtures" / "run_format2"


def _results(path: Path) -> dict[int, dict]:
    out = {}
    for line in (path / "trials.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "result":
            out[rec["trial"]["trial_id"]] = rec["result"]
    return out


def test_a_format_2_run_resumes_to_a_raised_budget(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    before = _results(run)
    assert sorted(before) == [0, 1, 2, 3, 4, 5]

    assert main(["search", "--resume", str(run), "--budget", "8", "--quiet"]) == 0

    lines = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]
    finished = [r["trial"]["trial_id"] for r in lines if r["kind"] == "result"]
    latest = _results(run)
    # the old records stand as they were; each new trial finished once
    assert lines[: len((FIXTURE / "trials.jsonl").read_text().splitlines())] == [
        json.loads(line) for line in (FIXTURE / "trials.jsonl").read_text().splitlines()]
    assert {i: latest[i] for i in before if finished.count(i) == 1} == {
        i: before[i] for i in before if finished.count(i) == 1}
    assert set(latest) >= set(range(8))
    assert all(Result.from_dict(r).outcome in (Outcome.COMPLETE, Outcome.FAILED, Outcome.STOPPED, Outcome.PAUSED)
               for r in latest.values())  # old records (state + reason) and new ones (outcome) both read
    assert "results in" in capsys.readouterr().out

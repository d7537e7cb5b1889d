"""Repeated crashes: a real search process SIGKILLed again and again at planned points (after the k-th journal record,
right after a promotion, in the middle of a snapshot), resumed after each kill, ends as the uninterrupted run did.

Every scheduler variant (ASHA stopping and promotion, Hyperband, median) and every strategy, on the in-process
executor (deterministic: the final results must equal an uninterrupted run's, each trial id ending once, a promoted
trial's run once). A refused resume (another search's arguments, or a replay that does not match the journal) changes
no byte of the run directory. The kills are real SIGKILLs of the search's own process (tests/crash_child.py).
"""

from __future__ import annotations

import collections
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nas
from nas.run.journal import read_records
from nas.run.reader import read_journal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import crash_child  # noqa: E402  (the child's own search, run here uninterrupted for the reference)

pytestmark = pytest.mark.slow

EVOLUTION = {"population": 6, "sample_size": 3}
CASES = {  # name: (strategy, its options, scheduler, the scheduler's options, budget)
    "asha-stopping": ("evolution", EVOLUTION, "asha", {"eta": 3}, 16),
    "asha-promotion": ("evolution", EVOLUTION, "asha", {"eta": 3, "variant": "promotion"}, 16),
    "hyperband": ("evolution", EVOLUTION, "hyperband", {"eta": 3, "variant": "promotion"}, 16),
    "median": ("evolution", EVOLUTION, "median", {"grace_period": 2}, 14),
    "random": ("random", {}, "none", {}, 14),
    "evolution": ("evolution", EVOLUTION, "none", {}, 14),
    "rl": ("rl", {}, "none", {}, 14),
    "pbt": ("pbt", {"population": 3, "quantile": 0.34}, "none", {}, 12),
    "optuna": ("optuna", {}, "none", {}, 14),
}


def spec(case: str, run_dir: Path, **kw) -> dict:
    strategy, options, scheduler, scheduler_options, budget = CASES[case]
    epochs = 3 if scheduler == "none" else 9
    return {"strategy": strategy, "options": options, "scheduler": scheduler, "scheduler_options": scheduler_options,
            "budget": budget, "epochs": epochs, "run_dir": str(run_dir), **kw}


def child(s: dict) -> subprocess.CompletedProcess:
    """The search of ``s`` in a process of its own (forked from a server that has imported it: crash_child.launch)."""
    return crash_child.launch(s, Path(s["run_dir"]).parent / "logs")


def rows(run_dir: Path) -> list[tuple]:
    return sorted((t.trial_id, nas.arch_key(t.arch), r.outcome.value, r.score, r.epoch)
                  for t, r in read_journal(run_dir))


def results_per_trial(run_dir: Path) -> collections.Counter:
    return collections.Counter(r.trial.trial_id for r in read_records(run_dir / "trials.jsonl") if r.kind == "result")


def counts(run_dir: Path) -> tuple[int, int]:
    """(journal records, promotions) so far."""
    lines = (run_dir / "trials.jsonl").read_bytes().splitlines() if (run_dir / "trials.jsonl").exists() else []
    return len(lines), sum(crash_child._promotion(line) for line in lines)


def tree(path: Path) -> dict[str, str]:
    """Every file of a run directory (the lock's own files included) and a hash of its bytes."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def kill_plan(case: str) -> list[str]:
    """Six kill points (kinds; their places come from the run's progress): four after the k-th journal record,
    one mid-snapshot and, where the scheduler promotes, one right after a promotion (else a fifth record)."""
    return ["records", "promotion" if CASES[case][3].get("variant") == "promotion" else "records", "records",
            "snapshot", "records", "records"]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The uninterrupted run of each case (computed once, on first use)."""
    cache: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in cache:
            path = tmp_path_factory.mktemp(f"ref-{case}") / "run"
            crash_child.main(spec(case, path))
            cache[case] = path
        return cache[case]

    return get


@pytest.mark.parametrize("case", list(CASES))
def test_six_kills_and_resumes_end_as_the_uninterrupted_run(tmp_path, references, case):
    reference = references(case)
    total, _ = counts(reference)
    rng = np.random.default_rng(sum(map(ord, case)))
    run_dir = tmp_path / "run"
    kills = []
    for i, kind in enumerate(kill_plan(case)):
        records, promotions = counts(run_dir)
        point = {"records": records + int(rng.integers(2, max(3, total // 8))), "promotion": promotions + 1,
                 "snapshot": 1}[kind]
        proc = child(spec(case, run_dir, resume=i > 0, kill={kind: point}))
        assert proc.returncode == -9, f"kill {i} ({kind} {point}) did not land: {proc.returncode} {proc.stderr[-3000:]}"
        kills.append((kind, point))
    proc = child(spec(case, run_dir, resume=True))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert rows(run_dir) == rows(reference), kills  # the same trials, architectures, outcomes, scores, epochs
    assert results_per_trial(run_dir) == results_per_trial(reference)  # each trial's runs ended once each


def test_a_refused_resume_changes_no_byte(tmp_path, references):
    """After a kill: a resume with other arguments, and one whose replay does not match the journal, are refused
    with one line; neither touches a byte (run.json, the lock's holder file, a torn last journal line included)."""
    run_dir = tmp_path / "run"
    assert child(spec("asha-promotion", run_dir, kill={"promotion": 1})).returncode == -9
    journal = run_dir / "trials.jsonl"
    journal.write_bytes(journal.read_bytes() + b'{"kind":"report","tri')  # torn by the kill, as it may be
    before = tree(run_dir)
    other = child(spec("asha-promotion", run_dir, resume=True, options={**EVOLUTION, "population": 7}))
    assert other.returncode == 1 and "it is a different search" in other.stderr
    assert tree(run_dir) == before
    lines = journal.read_bytes().splitlines(keepends=True)  # a journal whose first trial is another architecture
    first = next(i for i, line in enumerate(lines) if b'"kind":"submit"' in line)
    record = json.loads(lines[first])
    record["trial"]["arch"] = {k: 0 for k in record["trial"]["arch"]}
    lines[first] = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    journal.write_bytes(b"".join(lines))
    (run_dir / "snapshot.json").unlink(missing_ok=True)  # (so the replay starts at the first record)
    before = tree(run_dir)
    proc = child(spec("asha-promotion", run_dir, resume=True))
    assert proc.returncode == 1 and "does not replay deterministically" in proc.stderr, proc.stderr[-2000:]
    assert tree(run_dir) == before

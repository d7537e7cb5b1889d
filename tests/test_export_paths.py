"""Nothing a user types can write over a run: every command that writes a user-named file refuses a path that
resolves to one of a run directory's own files (relative, absolute, ./, .., a symlinked directory or file), with one
line and no byte changed; exports are atomic (no 0-byte file after a failure, errno's text in the line); weights are
exported only when they load as data. A new run refuses a folder holding a user's files, and a full disk at the start
leaves nothing behind."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

import nas
from nas.cli import main
from nas.run.export import owned_by_run, write_export
from nas.run.store import RunStore
from nas.train.settings import TrainSettings

MANAGED = ["trials.jsonl", "run.json", "snapshot.json", "best.json", "best.pt", "status.json", ".lock.json"]
EXPORTS = [  # (argv before the path, argv after it)
    (["results", "{run}", "--csv"], []),
    (["results", "{run}", "--parquet"], []),
    (["best", "{run}", "--export-json"], []),
    (["best", "{run}", "--export-weights"], []),
    (["report", "{run}", "--out"], []),
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A real run with best weights (toy space, digits, one epoch each, in-process)."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    nas.search("toy", "random", budget=3, executor="inprocess", seed=0, run_dir=run_dir, data="digits",
               settings=TrainSettings(epochs=1, seed=0, device="cpu", threads=1))
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    (run_dir / "checkpoints" / "1.pt").write_bytes((run_dir / "best.pt").read_bytes())
    return run_dir


@pytest.fixture
def run_copy(finished, tmp_path):
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


def tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def refused(capsys, argv, *fragments):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (code, err)
    for fragment in fragments:
        assert fragment in err, err


def spellings(run: Path, name: str, tmp_path: Path, monkeypatch) -> list[str]:
    """The same file of the run, spelled six ways: absolute, relative, ./, through .., a symlinked directory, a
    symlink to the file itself."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to(run, target_is_directory=True)
    (tmp_path / "alias.csv").symlink_to(run / name)
    return [str(run / name), f"run/{name}", f"./run/./{name}", f"run/checkpoints/../{name}", f"link/{name}",
            "alias.csv"]


@pytest.mark.parametrize("name", MANAGED)
@pytest.mark.parametrize(("before", "after"), EXPORTS, ids=lambda a: " ".join(a) if a else "")
def test_no_export_writes_over_a_file_of_the_run(run_copy, tmp_path, capsys, monkeypatch, name, before, after):
    (run_copy / "snapshot.json").exists() or (run_copy / "snapshot.json").write_text("{}")
    state = tree(run_copy)
    for path in spellings(run_copy, name, tmp_path, monkeypatch):
        refused(capsys, [a.format(run=run_copy) for a in before] + [path] + after, "refusing to write",
                f"it is {name} of the run directory")
    assert tree(run_copy) == state


def test_checkpoints_and_temporary_files_of_the_run_are_its_own(run_copy):
    assert owned_by_run(run_copy / "checkpoints" / "1.pt") == os.path.join("checkpoints", "1.pt")
    assert owned_by_run(run_copy / ".run.json.abc123") == ".run.json.abc123"
    assert owned_by_run(run_copy / "snapshot.json.0123456789abcdef.safetensors") is not None
    assert owned_by_run(run_copy / "report.html") is None and owned_by_run(run_copy.parent / "x.csv") is None


def test_exports_to_fresh_paths_work_and_are_whole(run_copy, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert main(["results", str(run_copy), "--csv", str(out / "r.csv"), "--parquet", str(out / "r.parquet")]) == 0
    assert main(["best", str(run_copy), "--export-json", str(out / "b.json"), "--export-weights",
                 str(out / "b.pt")]) == 0
    assert main(["report", str(run_copy), "--out", str(out / "r.html")]) == 0
    assert (out / "b.pt").read_bytes() == (run_copy / "best.pt").read_bytes()
    assert json.loads((out / "b.json").read_text())["trial_id"] == json.loads((run_copy / "best.json").read_text())[
        "trial_id"]
    assert sorted(p.name for p in out.iterdir()) == ["b.json", "b.pt", "r.csv", "r.html", "r.parquet"]  # no temp


def test_a_failed_export_leaves_no_file_and_names_errno_text(run_copy, tmp_path, capsys):
    refused(capsys, ["results", str(run_copy), "--csv", str(tmp_path / "missing" / "r.csv")],
            "No such file or directory")
    refused(capsys, ["best", str(run_copy), "--export-weights", str(tmp_path)], "is a directory")
    assert not (tmp_path / "missing").exists()


def test_crafted_best_weights_are_refused_not_exported(run_copy, tmp_path, capsys):
    crafted = pickle.dumps(Path("x"))  # not tensors and plain data
    (run_copy / "best.pt").write_bytes(crafted)
    best = json.loads((run_copy / "best.json").read_text())
    (run_copy / "best.json").write_text(json.dumps({**best, "weights_sha256": hashlib.sha256(crafted).hexdigest()}))
    refused(capsys, ["best", str(run_copy), "--export-weights", str(tmp_path / "w.pt")], "is not a plain checkpoint")
    assert not (tmp_path / "w.pt").exists()


# -- a new run's folder, and a full disk ---------------------------------------------------------------------
@pytest.mark.parametrize("files", [["best.pt"], ["best.json", "snapshot.json"], ["status.json"], ["notes.txt"]])
def test_a_new_run_refuses_a_folder_with_a_users_files(tmp_path, files):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in files:
        (folder / name).write_bytes(b"the user's own")
    before = tree(folder)
    with pytest.raises(ValueError, match=rf"is not empty \(it holds {files[0]}"):
        nas.search("toy", "random", budget=2, executor="inprocess", data=None, run_dir=folder,
                   train=nas.train.simple.noop)
    assert tree(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(files)  # not even a lock


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs of this test's own, filled up (root only: skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.decode().strip()}")
    try:
        with open(mount / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_at_the_start_leaves_nothing_and_says_so_in_one_line(full_disk, run_copy, capsys):
    with pytest.raises(ValueError, match="no space left on the device|No space left on device") as info:
        RunStore.create(full_disk / "runs" / "new", {"space": "toy", "strategy": "random", "budget": 1})
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # not even the directories it made
    refused(capsys, ["best", str(run_copy), "--export-weights", str(full_disk / "w.pt")], "No space left on device")
    refused(capsys, ["results", str(run_copy), "--csv", str(full_disk / "r.csv")], "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no 0-byte file, no temporary file


def test_write_export_is_atomic_over_an_existing_file(tmp_path):
    target = tmp_path / "r.csv"
    target.write_bytes(b"old")
    assert write_export(target, b"new") == 3 and target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]

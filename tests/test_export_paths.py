"""Nothing a user types can write over a run: every command that writes a user-named file refuses a path that
resolves to one of a run directory's own files (relative, absolute, ./, .., a symlinked directory or file), with one
line and no byte changed; exports are atomic (no 0-byte file after a failure, errno's text in the line); weights are
exported only when they load as data. A new run refuses a folder holding a user's files, and a full disk at the start
leaves nothing behind."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

import nas
from nas.cli import main
from nas.run.export import owned_by_run, write_export
from nas.run.store import RunStore
from nas.run.supernet_store import supernet_status
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
    try:
        code = main(argv)
    except SystemExit as e:  # (argparse's refusal of a flag's value: exit 2, one line after the usage)
        code = e.code
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and "error: argument" in err.strip().splitlines()[-1], err
        for fragment in fragments:
            assert fragment in err.strip().splitlines()[-1], err
        return
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


@pytest.mark.parametrize("name", [*MANAGED, "optuna.journal", "checkpoints/1.pt"])
def test_a_strategys_storage_is_never_a_file_of_a_run(run_copy, tmp_path, capsys, monkeypatch, name):
    """Optuna's `-o storage=PATH` wrote its journal into any file: another run's snapshot, lost to its resume."""
    (run_copy / "snapshot.json").exists() or (run_copy / "snapshot.json").write_text("{}")
    state = tree(run_copy)
    for path in spellings(run_copy, name, tmp_path, monkeypatch):
        refused(capsys, ["search", "--strategy", "optuna", "-o", f"storage={path}", "--executor", "inprocess",
                         "--run-dir", str(tmp_path / "new")], "strategy option storage: refusing to write",
                f"it is {name} of the run directory")
    assert tree(run_copy) == state and not (tmp_path / "new").exists()


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
    # (the temp file's errno, said of the file: "cannot write '/proc/version': No such file or directory")
    refused(capsys, ["results", str(run_copy), "--csv", str(tmp_path / "missing" / "r.csv")],
            f"cannot write '{tmp_path / 'missing' / 'r.csv'}': no file can be made in '{tmp_path / 'missing'}' (No "
            "such file or directory)")
    refused(capsys, ["best", str(run_copy), "--export-weights", str(tmp_path)], "is a directory")
    assert not (tmp_path / "missing").exists()


def test_crafted_best_weights_are_refused_not_exported(run_copy, tmp_path, capsys):
    crafted = pickle.dumps(Path("x"))  # not tensors and plain data
    (run_copy / "best.pt").write_bytes(crafted)
    best = json.loads((run_copy / "best.json").read_text())
    (run_copy / "best.json").write_text(json.dumps({**best, "weights_sha256": hashlib.sha256(crafted).hexdigest()}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (torch's "Detected pickle protocol 4" warning was printed before the line)
        refused(capsys, ["best", str(run_copy), "--export-weights", str(tmp_path / "w.pt")],
                "is not a plain checkpoint")
        # (--pareto --export skipped them without a word: "wrote front.json (1 members) and 0 weight files")
        refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(tmp_path / "front")],
                "best.pt is not a plain checkpoint")
    assert not (tmp_path / "w.pt").exists() and not (tmp_path / "front").exists()


def test_a_front_members_checkpoint_that_is_a_folder_is_refused_not_skipped(run_copy, tmp_path, capsys):
    best = json.loads((run_copy / "best.json").read_text())["trial_id"]
    kept = run_copy / "checkpoints" / f"{best}.pt"
    kept.unlink(missing_ok=True)
    kept.mkdir(parents=True)
    refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(tmp_path / "front")],
            f"checkpoints/{best}.pt is a folder, not a regular file")
    assert not (tmp_path / "front").exists()


# -- a new run's folder, and a full disk ---------------------------------------------------------------------
@pytest.mark.parametrize("files", [["best.pt"], ["best.json", "snapshot.json"], ["status.json"], ["notes.txt"],
                                   [".lock.json"], [".lock"]])  # (files of a lock's names, not a lock's: the user's)
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


def test_a_folder_a_killed_start_left_is_taken_by_a_new_run(tmp_path):
    """A search killed while it wrote its first run.json left the lock's files and ``.run.json.<8 characters>`` (its
    temporary file): no run ("no run.json"), and refused to a new search as "not empty". They are a search's own."""
    folder = tmp_path / "killed"
    folder.mkdir()
    (folder / ".lock").touch()
    (folder / ".lock.json").write_text(json.dumps({"pid": 1, "host": "h", "started": 0.0}))
    (folder / ".run.json.k2x_9q0a").write_bytes(b'{"format": 3, "sea')
    (folder / ".run.json.mine").write_bytes(b"a user's, not of that form")
    with pytest.raises(ValueError, match=r"is not empty \(it holds \.run\.json\.mine\)"):
        nas.search("toy", "random", budget=2, executor="inprocess", data=None, run_dir=folder,
                   train=nas.train.simple.noop)
    (folder / ".run.json.mine").unlink()
    nas.search("toy", "random", budget=2, executor="inprocess", data=None, run_dir=folder, train=nas.train.simple.noop)
    assert not (folder / ".run.json.k2x_9q0a").exists() and len(nas.load_results(folder)) == 2


def test_retrain_names_its_folder_by_its_own_flag(run_copy, tmp_path, capsys):
    """`nas retrain RUN` trains the best trial again in RUN/retrain; the same command again continues that retraining
    (here: finished, so nothing more), one of other settings is refused naming --out (and no --resume: retrain has
    none); a folder of the user's is refused as every new run's is."""
    assert main(["retrain", str(run_copy), "--executor", "inprocess", "--epochs", "1"]) == 0
    assert f"retrained in {run_copy / 'retrain'}" in capsys.readouterr().out
    state = tree(run_copy)
    refused(capsys, ["retrain", str(run_copy), "--executor", "inprocess", "--epochs", "2"],
            f"--out {str(run_copy / 'retrain')!r} holds a retraining of other settings (epochs: run has 1, this call "
            "2); choose another --out")
    refused(capsys, ["retrain", str(run_copy), "--top", "0"], "top must be an integer >= 1, got 0")  # (first)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    refused(capsys, ["retrain", str(run_copy), "--out", str(tmp_path / "mine")], "is not empty (it holds notes.txt)",
            "choose another --out")
    assert tree(run_copy) == state and tree(tmp_path / "mine") == {"notes.txt": hashlib.sha256(b"mine").hexdigest()}


@contextlib.contextmanager
def tmpfs(where, size):
    """A tmpfs of ``size`` of this test's own (root only: skipped elsewhere), unmounted after."""
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.decode().strip()}")
    try:
        yield where
    finally:  # (lazily where a file is still open in it, so that no mount outlives the test)
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def disk_free(mount):
    return shutil.disk_usage(mount).free


def fill(mount):
    """Fill ``mount`` up with (more of) a file ``filler``."""
    with open(mount / "filler", "ab") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs of this test's own, filled up."""
    with tmpfs(tmp_path / "small", "1m") as mount:
        fill(mount)
        yield mount


def test_a_full_disk_at_the_start_leaves_nothing_and_says_so_in_one_line(full_disk, run_copy, capsys):
    with pytest.raises(ValueError, match="No space left on device") as info:
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


# -- a supernet run's files, directory exports, benchmark and log outputs, runs inside checkpoints/ ------------------
SUPERNET_FILES = ["epochs.jsonl", "checkpoint.json", "checkpoint.json.0123456789abcdef.safetensors",
                  "supernet.safetensors", "status.json", "run.json"]


@pytest.fixture
def supernet_dir(tmp_path):
    """A supernet run's directory as `nas supernet train` leaves it (its files' names are what the guard reads)."""
    sn = tmp_path / "sn"
    sn.mkdir()
    for name in SUPERNET_FILES:
        (sn / name).write_text(json.dumps({"kind": "supernet"}) if name == "run.json" else f"{name} of the run")
    return sn


@pytest.mark.parametrize("name", SUPERNET_FILES)
def test_no_export_writes_over_a_supernet_runs_file(run_copy, supernet_dir, capsys, name):
    state = tree(supernet_dir)
    for before in (["results", str(run_copy), "--csv"], ["best", str(run_copy), "--export-json"],
                   ["report", str(run_copy), "--out"]):
        refused(capsys, [*before, str(supernet_dir / name)], "refusing to write", f"it is {name} of the run")
    assert tree(supernet_dir) == state


def test_a_front_is_never_exported_into_a_run(run_copy, supernet_dir, tmp_path, capsys):
    """Into the run itself, its checkpoints/, or a folder whose front.json or weights/ is a symlink into a run."""
    state, sn_state = tree(run_copy), tree(supernet_dir)
    linked_file, linked_dir = tmp_path / "u1", tmp_path / "u2"
    linked_file.mkdir()
    (linked_file / "front.json").symlink_to(run_copy / "trials.jsonl")
    linked_dir.mkdir()
    (linked_dir / "weights").symlink_to(supernet_dir)
    for out in (run_copy, run_copy / "checkpoints", run_copy / "sub", supernet_dir):
        refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(out)], "refusing to export into",
                "which the run owns")
    refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(linked_file)], "refusing to write",
            "it is trials.jsonl of the run")
    refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(linked_dir)], "refusing to export into",
            "weights")
    assert tree(run_copy) == state and tree(supernet_dir) == sn_state


def test_a_front_export_replaces_only_what_an_earlier_export_wrote(run_copy, tmp_path, capsys):
    """`--pareto --export DIR` replaced a user's front.json and weights/<id>.pt in an existing folder."""
    again = tmp_path / "again"
    for _ in range(2):  # (a second export into the first one's folder replaces its files)
        assert main(["best", str(run_copy), "--pareto", "--export", str(again)]) == 0
    weights = [str(p.relative_to(again)) for p in (again / "weights").iterdir()]
    assert len(weights) == 1 and len(list(again.rglob("*"))) == 3
    capsys.readouterr()
    for name in ("front.json", *weights):
        out = tmp_path / name.replace("/", "-")
        (out / "weights").mkdir(parents=True)
        (out / name).write_text("mine")
        refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(out)], "refusing to write",
                f"{name}': a file of that name is there and", "choose a new or empty folder")
        assert (out / name).read_text() == "mine" and len(list(out.rglob("*"))) == 2


def test_a_front_export_killed_before_its_front_json_can_be_made_again(run_copy, tmp_path, capsys):
    """An export killed between a member's weights and front.json left weights/<id>.pt that no front.json lists: the
    same export again was refused ("no earlier export of a front wrote it"). A file of the very bytes it writes is
    replaced (a user's file of other bytes stays refused, above)."""
    first = tmp_path / "first"
    assert main(["best", str(run_copy), "--pareto", "--export", str(first)]) == 0
    killed = tmp_path / "killed"
    shutil.copytree(first / "weights", killed / "weights")  # (what the killed export had written)
    assert main(["best", str(run_copy), "--pareto", "--export", str(killed)]) == 0
    assert tree(killed) == tree(first)
    capsys.readouterr()


def test_a_failed_export_of_the_best_prints_only_its_error(run_copy, tmp_path, capsys):
    """The best trial's block (27 lines) was printed before the export's error."""
    for flag in ("--export-json", "--export-weights", "--draw"):
        assert main(["best", str(run_copy), flag, "/dev/full" if flag != "--draw" else str(tmp_path / "no/x.dot")]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1, (flag, out, err)


@pytest.mark.parametrize("argv", [["search", "--executor", "inprocess", "--run-dir", "{long}"], ["results", "{long}"],
                                  ["results", "{run}", "--csv", "{long}/x.csv"], ["report", "{run}", "--out", "{long}"],
                                  ["best", "{run}", "--export-weights", "{long}.pt"], ["status", "{long}"],
                                  ["best", "{run}", "--pareto", "--export", "{long}"], ["search", "--resume", "{long}"],
                                  ["supernet", "train", "--executor", "inprocess", "--run-dir", "{long}"]])
def test_a_name_too_long_for_the_file_system_is_one_line(run_copy, tmp_path, capsys, argv):
    """A path part past 255 bytes: Path.exists raises ENAMETOOLONG on Python 3.11, a traceback in every command."""
    long = str(tmp_path / ("a" * 300))
    refused(capsys, [a.format(run=run_copy, long=long) for a in argv], "File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_front_export_on_a_full_disk_leaves_no_part_of_a_file(full_disk, run_copy, capsys):
    (full_disk / "front" / "weights").mkdir(parents=True)
    (full_disk / "front" / "weights" / "notes").write_bytes(b"")  # (a user's file: kept as it was)
    refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(full_disk / "front")],
            "No space left on device")
    assert [p.name for p in (full_disk / "front" / "weights").iterdir()] == ["notes"]
    assert (full_disk / "front" / "weights" / "notes").read_bytes() == b""
    refused(capsys, ["best", str(run_copy), "--pareto", "--export", str(full_disk / "new" / "front")],
            "No space left on device")
    assert not (full_disk / "new").exists()  # (it left new/front/weights/, empty)


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # (a thread's traceback)
def test_logs_on_a_full_disk_stop_with_one_line_each_and_the_search_completes(full_disk, tmp_path, capsys, caplog):
    """``--log`` onto a full disk: each log says in one warning that it stopped (TensorBoard's writer thread prints
    no traceback), and the search, its run directory elsewhere, completes and exits 0."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    logs = [f"tensorboard:{full_disk / 'tb'}", f"mlflow:{full_disk / 'ml'}"]
    with caplog.at_level("WARNING", logger="nas.monitor.logs"):
        code = main(["search", "--space", "toy", "--strategy", "random", "--executor", "inprocess", "--budget", "3",
                     "--run-dir", str(tmp_path / "run"), *[a for spec in logs for a in ("--log", spec)]])
    assert code == 0 and "Traceback" not in capsys.readouterr().err
    said = sorted(r.getMessage() for r in caplog.records if "stopped logging" in r.getMessage())
    assert [m.split(" stopped logging: ")[0] for m in said] == [f"--log {s}" for s in sorted(logs)]
    assert "database or disk is full" in said[0] and "No space left on device" in said[1]
    assert (nas.load_results(tmp_path / "run")["state"] == "COMPLETE").sum() == 3


def test_an_export_to_a_pipe_or_a_device_writes_into_it_and_leaves_it_in_place(run_copy, tmp_path, capsys):
    """`--csv /dev/null` replaced /dev/null with a plain file (the temporary file was renamed over it; as root that
    breaks the machine). Here on a FIFO and, where the test may make device nodes, a null device of its own."""
    import select
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # (the reader is there before the export opens the pipe)
    got: list[bytes] = []

    def drain() -> None:  # (select wakes once a writer came: its bytes, then end of file when it closes)
        while select.select([fd], [], [], 60)[0]:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert main(["results", str(run_copy), "--csv", str(fifo)]) == 0
        reader.join(timeout=60)
    finally:
        os.close(fd)
    assert b"".join(got).startswith(b"trial_id,") and stat.S_ISFIFO(fifo.lstat().st_mode)
    null = tmp_path / "null"
    if subprocess.run(["mknod", "-m", "666", str(null), "c", "1", "3"], capture_output=True).returncode == 0:
        assert main(["best", str(run_copy), "--export-json", str(null)]) == 0
        assert stat.S_ISCHR(null.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["pipe", "run", *["null"] * null.exists()])
    capsys.readouterr()


def test_an_export_to_a_pipe_no_one_reads_or_a_loop_of_links_is_one_line(run_copy, tmp_path, capsys):
    """A FIFO without a reader left every export waiting in open() forever; a loop of symbolic links was replaced by
    a plain file (exit 0)."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for argv in (["results", str(run_copy), "--csv"], ["best", str(run_copy), "--export-json"],
                 ["report", str(run_copy), "--out"]):
        refused(capsys, [*argv, str(tmp_path / "pipe")], f"cannot write '{tmp_path / 'pipe'}': it is a pipe that no "
                                                          "process reads")
        refused(capsys, [*argv, str(tmp_path / "a")], f"cannot write '{tmp_path / 'a'}': Too many levels of symbolic "
                                                       "links")
    assert (tmp_path / "a").is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "pipe", "run"]


def test_a_benchmarks_output_is_written_as_every_export(run_copy, tmp_path):
    from benchmarks.harness import write_json

    state = tree(run_copy)
    with pytest.raises(ValueError, match="refusing to write .*it is trials.jsonl of the run"):
        write_json(str(run_copy / "trials.jsonl"), {"x": 1})
    with pytest.raises(ValueError, match="No such file or directory"):
        write_json(str(tmp_path / "missing" / "b.json"), {"x": 1})
    write_json(str(tmp_path / "b.json"), {"x": 1})
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 1} and tree(run_copy) == state


@pytest.mark.parametrize("argv", [["bench", "strategies", "--strategies", "random", "--seeds", "1"],
                                  ["bench", "strategies", "--objective", "val_acc", "--objective", "params:min"],
                                  ["bench", "scaling"], ["bench", "proxies"]])
def test_a_benchmarks_output_folder_is_checked_before_it_runs(run_copy, tmp_path, capsys, argv):
    """--out of a file was a FileExistsError traceback after the benchmark ran; into a run directory it wrote its
    CSV and plot there."""
    (tmp_path / "afile").write_text("mine")
    state = tree(run_copy)
    for out, said in [(tmp_path / "afile", "it is a file; name a folder"), (run_copy, "it is the run directory"),
                      (run_copy / "sub", "it is inside the run directory"), ("", "is an empty path")]:
        refused(capsys, [*argv, "--out", str(out)], said)
    assert tree(run_copy) == state and (tmp_path / "afile").read_text() == "mine"


def test_a_multi_objective_benchmarks_figure_is_checked_before_it_runs(run_copy, tmp_path, capsys):
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "l.png").symlink_to(run_copy / "best.json")
    base = ["bench", "mo-train", "--quick", "--methods", "random", "--executor", "inprocess", "--out"]
    refused(capsys, [*base, str(tmp_path / "afile" / "x.png")], "afile' is a file, not a folder")
    refused(capsys, [*base, str(tmp_path / "l.png")], "it is best.json of the run directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "l.png", "run"]


@pytest.mark.parametrize("where", ["file", "run", "in-run", "checkpoints"])
def test_a_log_directory_is_checked_before_the_run_is_made(run_copy, tmp_path, capsys, where):
    (tmp_path / "file").write_text("mine")
    target = {"file": tmp_path / "file", "run": run_copy, "in-run": run_copy / "tb",
              "checkpoints": run_copy / "checkpoints"}[where]
    state = tree(run_copy)
    refused(capsys, ["search", "--space", "toy", "--strategy", "random", "--executor", "inprocess", "--dataset",
                     "none", "--train-function", "nas.train.simple:noop", "--budget", "1", "--quiet", "--run-dir",
                     str(tmp_path / "new"), "--log", f"tensorboard:{target}"], "--log tensorboard:")
    assert not (tmp_path / "new").exists() and tree(run_copy) == state and (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("inside", ["checkpoints", "checkpoints/x"])
def test_no_new_run_is_made_in_a_runs_checkpoints(run_copy, inside):
    from nas.run.supernet_store import SupernetStore

    state = tree(run_copy)
    with pytest.raises(ValueError, match="the kept checkpoints of the run directory"):
        RunStore.create(run_copy / inside, {"space": "toy", "strategy": "random", "budget": 1})
    with pytest.raises(ValueError, match="the kept checkpoints of the run directory"):
        SupernetStore.create(run_copy / inside, {"space": "macro", "epochs": 1})
    assert tree(run_copy) == state and sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == ["1.pt"]


@pytest.mark.parametrize("files", [["status.json", "supernet.safetensors"], ["best.pt"], ["notes.txt"]])
def test_a_new_supernet_run_refuses_a_folder_with_a_users_files(tmp_path, files):
    from nas.run.supernet_store import SupernetStore

    folder = tmp_path / "mine"
    folder.mkdir()
    for name in files:
        (folder / name).write_bytes(b"the user's own")
    before = tree(folder)
    with pytest.raises(ValueError, match=rf"is not empty \(it holds {files[0]}"):
        SupernetStore.create(folder, {"space": "macro", "epochs": 1})
    assert tree(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(files)  # not even a lock


def test_a_supernet_run_on_a_full_disk_or_with_bad_epochs_leaves_nothing(full_disk, tmp_path, capsys):
    from nas.run.supernet_store import SupernetStore

    with pytest.raises(ValueError, match=r"^No space left on device \(") as info:
        SupernetStore.create(full_disk / "runs" / "sn", {"space": "macro", "epochs": 1})
    assert "\n" not in str(info.value) and sorted(p.name for p in full_disk.iterdir()) == ["filler"]
    refused(capsys, ["supernet", "train", "--executor", "inprocess", "--dataset", "synthetic", "--epochs", "0",
                     "--quiet", "--run-dir", str(tmp_path / "snx")], "epochs must be an integer >= 1, got 0")
    assert not (tmp_path / "snx").exists()


def test_a_supernet_run_that_fills_its_disk_keeps_its_epochs_and_resumes(tmp_path, capsys):
    """The disk fills while a supernet trains (here: right after its first epoch): one line saying what is kept and
    the command that continues (it was an OSError traceback); that command, once there is space, ends where a run
    that never stopped ends. A resume on a disk with no room says the same; a new run whose first epoch cannot be
    written is taken back whole (its checkpoint's tensor file included)."""
    import torch
    from safetensors.torch import load_file

    from nas.oneshot import train_supernet

    run = {"epochs": 3, "settings": TrainSettings(device="cpu", threads=1), "executor": "inprocess",
           "progress": False}  # (bit for bit: one thread)
    train_supernet("macro", "synthetic", tmp_path / "whole", **run)
    with tmpfs(tmp_path / "disk", "16m") as disk:
        with pytest.raises(ValueError) as info:
            train_supernet("macro", "synthetic", disk / "sn", **run, on_epoch=lambda record: fill(disk))
        said = (f"No space left on device ({disk / 'sn'}): the run keeps its epochs up to 1; free some space, "
                f"then continue with: nas supernet train --resume --run-dir {disk / 'sn'}")
        assert str(info.value) == said and supernet_status(disk / "sn")["epochs_done"] == 1
        resume = ["supernet", "train", "--resume", "--run-dir", str(disk / "sn"), "--executor", "inprocess",
                  "--device", "cpu", "--threads", "1", "--quiet"]
        assert main(resume) == 2  # (no room for the lock's note: the resume cannot start)
        assert capsys.readouterr().err.strip() == f"nas supernet: error: {said}"
        os.truncate(disk / "filler", (disk / "filler").stat().st_size - 2**20)  # (room for a run.json, not an epoch)
        assert main(["supernet", "train", "--executor", "inprocess", "--dataset", "synthetic", "--quiet",
                     "--run-dir", str(disk / "new")]) == 2
        assert capsys.readouterr().err.strip().endswith("the supernet's first epoch could not be written, so nothing "
                                                        "of the run is kept; free some space, then start it again")
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "sn"]
        assert main(resume) == 2  # (room to start, not for an epoch)
        assert capsys.readouterr().err.strip() == f"nas supernet: error: {said}"
        (disk / "filler").unlink()
        assert main(resume) == 0
        resumed, whole = (load_file(d / "supernet.safetensors") for d in (disk / "sn", tmp_path / "whole"))
    assert resumed.keys() == whole.keys() and all(torch.equal(resumed[k], whole[k]) for k in whole)


@pytest.mark.parametrize("argv", [["results", "{run}", "--csv"], ["best", "{run}", "--export-json"],
                                  ["best", "{run}", "--pareto", "--export"], ["report", "{run}", "--out"],
                                  ["search", "--run-dir"], ["supernet", "train", "--run-dir"]])
def test_an_empty_path_is_refused_not_read_as_skip_or_here(run_copy, tmp_path, capsys, monkeypatch, argv):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(SystemExit) if argv[0] != "search" else contextlib.nullcontext():
        code = main([a.format(run=run_copy) for a in argv] + [""])
        assert code == 2
    err = capsys.readouterr().err
    assert "is an empty path" in err and "Traceback" not in err
    assert list(here.iterdir()) == []


def test_a_path_ending_in_a_slash_names_a_folder_and_a_look_alike_name_is_the_users(run_copy, tmp_path, capsys):
    refused(capsys, ["results", str(run_copy), "--csv", str(tmp_path / "new") + "/"], "ends in a slash")
    assert not (tmp_path / "new").exists()
    assert main(["results", str(run_copy), "--csv", str(run_copy / "trials.jsonl.csv")]) == 0  # (not the journal)
    assert owned_by_run(run_copy / "trials.jsonl.csv") is None and owned_by_run(run_copy / ".trials.jsonl.x")


def test_searches_started_in_one_second_each_get_a_default_folder(tmp_path, monkeypatch):
    """(A second short nas.search() without run_dir in the same second was refused: "already holds a run".)"""
    import datetime

    import nas.session

    class Frozen(datetime.datetime):  # (the three searches start in one second, as short ones in a loop do)
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 4, 20, 0, 0)

    monkeypatch.setattr(nas.session.datetime, "datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    for _ in range(3):
        nas.search("toy", "random", budget=1, executor="inprocess", data=None, train=nas.train.simple.noop,
                   progress=False)
    made = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert made == ["20261204-200000-toy-random", "20261204-200000-toy-random-2", "20261204-200000-toy-random-3"]

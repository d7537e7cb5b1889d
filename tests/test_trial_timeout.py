"""A trial that hangs fails as TIMEOUT after the run's trial_timeout and the search goes on (in-process: its thread,
which cannot be stopped, is left behind; on Ray: its worker is stopped and replaced, and a trial queued behind it runs
again elsewhere). The hang is provoked: the training function of one trial waits on an event that nothing sets until
the test ends. (With no limit, one hanging trial stalled an in-process search for good, and a resume ran it again.)"""

from __future__ import annotations

import json
import sys
import threading

import pytest
import ray

import nas
from nas.search_spaces.toy import ToySpace, toy_score
from tests.helpers import FAST

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module

RELEASE = threading.Event()  # (set at the end of each test: the in-process thread left behind then ends)


def hangs_in_process(ctx):
    """Trial 1 hangs until the test ends (its thread, left behind, then ends)."""
    if ctx.trial.trial_id == 1:
        RELEASE.wait()
    ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))


def hangs_on_ray(ctx):
    """Trial 1 hangs until its worker is stopped."""
    if ctx.trial.trial_id == 1:
        threading.Event().wait()
    ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))


@pytest.fixture
def release():
    RELEASE.clear()
    yield
    RELEASE.set()


def test_a_hanging_trial_fails_as_timeout_in_process_and_the_search_goes_on(tmp_path, release):
    df = nas.search(ToySpace(), "random", budget=4, executor="inprocess", data=None, train=hangs_in_process,
                    seed=0, run_dir=tmp_path / "run", progress=False, settings=nas.TrainSettings(trial_timeout=1.0))
    assert len(df) == 4 and list(df.failure.fillna("-")) == ["-", "TIMEOUT", "-", "-"]
    error = df.set_index("trial_id").error[1]
    assert error == ("TIMEOUT: it ran past trial_timeout (1 s); in-process its thread cannot be stopped and was left "
                     "behind")
    assert nas.load_results(tmp_path / "run").failure.tolist()[1] == "TIMEOUT"


def test_a_hanging_trial_fails_as_timeout_on_ray_its_worker_replaced(ray_local, tmp_path):
    df = nas.search(ToySpace(), "random", budget=6, executor="ray", workers=2, cpus_per_trial=0.5, data=None,
                    train=hangs_on_ray, seed=0, run_dir=tmp_path / "run", progress=False,
                    settings=nas.TrainSettings(trial_timeout=3.0), executor_options={"prefetch": True})
    by_id = df.set_index("trial_id")
    assert sorted(by_id.index) == list(range(6)) and by_id.failure[1] == "TIMEOUT"
    assert by_id.error[1] == "TIMEOUT: it ran past trial_timeout (3 s); its worker was stopped and replaced"
    assert (by_id.drop(index=1).state == "COMPLETE").all()  # (a trial queued behind it ran again elsewhere)
    assert by_id.duration[1] >= 3.0  # (its worker's time went to it: it had no times, and the utilization fell)


@pytest.mark.parametrize(("kw", "message"), [
    (dict(executor="simulated", space="nb201"), r"the simulated executor runs no trial that could hang "
                                                r"\(trial_timeout 5.0\): leave it out"),
    (dict(settings_kw={"trial_timeout": 0}), r"trial_timeout must be None \(no limit\) or a finite number of seconds "
                                             r"> 0, got 0"),
    (dict(settings_kw={"trial_timeout": float("inf")}), "trial_timeout must be None"),
])
def test_a_trial_timeout_the_run_cannot_keep_is_refused(tmp_path, kw, message):
    settings_kw = kw.pop("settings_kw", {"trial_timeout": 5.0})
    space = kw.pop("space", ToySpace())
    with pytest.raises(ValueError, match=message):
        nas.search(space, "random", budget=2, data=None, seed=0, run_dir=tmp_path / "run", progress=False,
                   settings=nas.TrainSettings(**settings_kw), **{"executor": "inprocess", **kw})
    assert not (tmp_path / "run").exists()


def test_gangs_refuse_a_trial_timeout_before_ray_starts():
    """(Refused only once the private Ray cluster had started.)"""
    from nas.parts import check_inputs
    from nas.run.config import RunConfig

    cfg = RunConfig.from_mapping({"space": "toy", "executor": "ray", "trial_workers": 2, "trial_timeout": 5.0})
    with pytest.raises(ValueError, match=r"trial_timeout \(5.0 s\) is not enforced on data-parallel gangs "
                                         r"\(--trial-workers 2\) yet"):
        check_inputs(cfg)


def test_a_retraining_does_not_inherit_the_searchs_trial_timeout(tmp_path):
    """(A run made with --trial-timeout 2, retrained for 8 epochs, failed every model as TIMEOUT and exited 0.)"""
    import json

    nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop, seed=0,
               run_dir=tmp_path / "run", progress=False, settings=nas.TrainSettings(trial_timeout=2.0))
    nas.retrain(tmp_path / "run", top=1, out_dir=tmp_path / "again", executor="inprocess", progress=False)
    made = json.loads((tmp_path / "again" / "run.json").read_text())
    assert made["train"]["settings"]["trial_timeout"] is None


def test_a_resume_may_set_a_trial_timeout_and_run_json_keeps_it(tmp_path, release):
    """A run made with no limit that hung resumes with one (it was refused as another search, and the CLI refused the
    flag: the resume ran the hanging trial again for good); the next resume keeps it."""
    run = tmp_path / "run"
    kw = dict(executor="inprocess", data=None, train=hangs_in_process, seed=0, run_dir=run, progress=False)
    nas.search(ToySpace(), "random", budget=1, **kw)
    df = nas.search(ToySpace(), "random", budget=3, resume=True, settings=nas.TrainSettings(trial_timeout=1.0), **kw)
    assert list(df.failure.fillna("-")) == ["-", "TIMEOUT", "-"]
    assert json.loads((run / "run.json").read_text())["train"]["settings"]["trial_timeout"] == 1.0


def test_the_cli_resume_takes_a_trial_timeout(tmp_path, nas_cli):
    run = str(tmp_path / "run")
    assert nas_cli("search", *FAST, "--budget", "1", "--run-dir", run)[0] == 0
    code, out, err = nas_cli("search", "--resume", run, "--budget", "2", "--trial-timeout", "30", "--quiet")
    assert code == 0 and "finished 2 trials" in out, err
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train"]["settings"]["trial_timeout"] == 30.0
    code, _, err = nas_cli("search", "--resume", run, "--trial-timeout", "0")
    assert code == 2 and err.strip().endswith("--trial-timeout must be none (no limit) or a finite number of seconds "
                                              "> 0, got 0.0"), err


def reports_then_hangs(ctx):
    """Trial 1 reports two epochs, then hangs until the test ends."""
    for epoch in (1, 2):
        ctx.report(epoch=epoch, val_acc=toy_score(ctx.trial.arch) * epoch / 2)
    if ctx.trial.trial_id == 1:
        RELEASE.wait()


def test_a_timed_out_trial_keeps_the_learning_curve_it_reported(tmp_path, release):
    """(Its result had no history and epoch 0, though its reports were in the journal.)"""
    df = nas.search(ToySpace(), "random", budget=3, executor="inprocess", data=None, train=reports_then_hangs,
                    seed=0, run_dir=tmp_path / "run", progress=False, settings=nas.TrainSettings(trial_timeout=1.0))
    row = df.set_index("trial_id").loc[1]
    reports = [json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    reported = [{"epoch": r["report"]["epoch"], **r["report"]["metrics"]} for r in reports
                if r.get("kind") == "report" and r["report"]["trial_id"] == 1]
    assert row.failure == "TIMEOUT" and row.epochs == 2 and len(reported) == 2
    assert list(row.history) == reported


def test_a_resume_can_remove_a_trial_timeout_with_none(tmp_path, nas_cli):
    """(Once a resume set one it could never be removed: --trial-timeout none was "invalid float value", and 0 said
    it must be None, which the flag cannot take.)"""
    run = str(tmp_path / "run")
    assert nas_cli("search", *FAST, "--budget", "1", "--trial-timeout", "30", "--run-dir", run)[0] == 0
    assert nas_cli("search", "--resume", run, "--budget", "2", "--trial-timeout", "none")[0] == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train"]["settings"]["trial_timeout"] is None
    code, _, err = nas_cli("search", "--resume", run, "--trial-timeout", "0")
    assert code == 2 and "--trial-timeout must be none (no limit) or a finite number of seconds > 0" in err


def test_a_python_resume_that_names_no_runtime_setting_keeps_the_runs_own(tmp_path, nas_cli):
    """(It ran with the defaults and recorded them: a trial timeout and a device set on the command line were lost
    for good, and the next resume ran without them.)"""
    run = str(tmp_path / "run")
    assert nas_cli("search", *FAST, "--budget", "1", "--trial-timeout", "30", "--device", "cpu", "--run-dir",
                   run)[0] == 0
    nas.search("toy", "evolution", budget=2, executor="inprocess", epochs=1, run_dir=run, resume=True, progress=False)
    settings = json.loads((tmp_path / "run" / "run.json").read_text())["train"]["settings"]
    assert (settings["trial_timeout"], settings["device"]) == (30.0, "cpu")
    nas.search("toy", "evolution", budget=3, executor="inprocess", epochs=1, run_dir=run, resume=True, progress=False,
               trial_timeout=60.0)  # (one it names: taken)
    settings = json.loads((tmp_path / "run" / "run.json").read_text())["train"]["settings"]
    assert (settings["trial_timeout"], settings["device"]) == (60.0, "cpu")

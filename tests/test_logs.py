"""`--log tensorboard:DIR` and `--log mlflow:DIR`: a scripted in-process search with an ASHA scheduler, its
files read back with TensorBoard's own EventAccumulator and MLflow's own client."""

from __future__ import annotations

import pytest

import nas
from nas.search_spaces.toy import ToySpace, toy_score

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")


def three_epochs(ctx):
    for epoch in (1, 2, 3):
        if ctx.report(epoch=epoch, val_acc=toy_score(ctx.trial.arch) * epoch / 3, train_loss=1.0 / epoch):
            return


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    df = nas.search(ToySpace(), "random", budget=6, executor="inprocess", seed=0, data=None, train=three_epochs,
                    run_dir=root / "run", scheduler="asha", epochs=3,
                    log=[f"tensorboard:{root / 'tb'}", f"mlflow:{root / 'ml'}"])
    return root, df


def test_tensorboard_curves_and_hparams_read_back(logged):
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    root, df = logged
    for row in df.itertuples():
        acc = EventAccumulator(str(root / "tb" / f"trial-{row.trial_id}"))
        acc.Reload()
        curve = [(e.step, float(e.tensor_proto.float_val[0])) for e in acc.Tensors("val_acc")]
        assert [s for s, _ in curve] == list(range(1, row.epochs + 1))  # one point per epoch it trained
        assert curve[-1][1] == pytest.approx(row.metrics["val_acc"], abs=1e-6)
        if row.outcome == "COMPLETE":
            assert "objective/val_acc" in acc.Tags()["tensors"]  # the hparams plugin's metric
            info = HParamsPluginData.FromString(acc.PluginTagToContent("hparams")["_hparams_/session_start_info"])
            hparams = {k: v.number_value for k, v in info.session_start_info.hparams.items()}
            arch = ToySpace().parse(row.arch)
            assert hparams == {f"arch/{k}": float(v) for k, v in dict(arch).items()}
    search = EventAccumulator(str(root / "tb" / "search"))
    search.Reload()
    best = search.Tensors("search/best_val_acc")
    assert best[-1].step == len(df) and best[-1].tensor_proto.float_val[0] == pytest.approx(df.score.max())


def test_mlflow_parent_and_a_run_per_trial_read_back(logged):
    from mlflow import MlflowClient

    root, df = logged
    client = MlflowClient(tracking_uri=f"sqlite:///{(root / 'ml' / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name("run")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.info.run_name == "search")
    trials = {int(r.data.tags["nas.trial"]): r for r in runs if "nas.trial" in r.data.tags}
    assert set(trials) == set(df.trial_id) and parent.info.status == "FINISHED"
    assert parent.data.metrics["best_val_acc"] == pytest.approx(df.score.max())  # (val_acc:max: the score)
    assert (df.outcome == "STOPPED").any()  # ASHA stopped some: KILLED in MLflow
    for row in df.itertuples():
        run = trials[row.trial_id]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == ("FINISHED" if row.outcome == "COMPLETE" else "KILLED")
        history = client.get_metric_history(run.info.run_id, "val_acc")
        assert [m.step for m in history] == list(range(1, row.epochs + 1))
        assert set(run.data.params) == {f"arch/{k}" for k in ToySpace().dims()}


def test_a_minimised_objective_is_logged_by_its_name_in_its_own_units(tmp_path):
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    def error(ctx):
        ctx.report(epoch=1, err=1.0 - toy_score(ctx.trial.arch))

    df = nas.search(ToySpace(), "random", budget=5, executor="inprocess", seed=0, data=None, train=error,
                    run_dir=tmp_path / "run", objectives=["err:min"],
                    log=[f"tensorboard:{tmp_path / 'tb'}", f"mlflow:{tmp_path / 'ml'}"])
    lowest = min(m["err"] for m in df.metrics)
    assert lowest > 0  # (a sign-flipped score would be below 0)
    search = EventAccumulator(str(tmp_path / "tb" / "search"))
    search.Reload()
    assert search.Tensors("search/best_err")[-1].tensor_proto.float_val[0] == pytest.approx(lowest)
    client = MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'ml' / 'mlflow.db').resolve()}")
    parent = next(r for r in client.search_runs([client.get_experiment_by_name("run").experiment_id])
                  if r.info.run_name == "search")
    assert parent.data.metrics["best_err"] == pytest.approx(lowest)


def test_a_log_that_fails_says_so_once_and_the_search_goes_on(tmp_path, caplog):
    """A log that cannot write (here: MLflow's database is a folder, TensorBoard's search log a file; a full disk in
    tests/test_export_paths.py) ends with one warning line each; every trial still completes and is journaled."""
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "mlflow.db").write_text("not a database")
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "search").write_text("a file where the search's log folder goes")
    specs = [f"tensorboard:{tmp_path / 'tb'}", f"mlflow:{tmp_path / 'ml'}"]
    with caplog.at_level("WARNING", logger="nas.monitor.logs"):
        df = nas.search(ToySpace(), "random", budget=4, executor="inprocess", seed=0, data=None, train=three_epochs,
                        run_dir=tmp_path / "run", epochs=3, log=specs)
    assert len(df) == 4 and (df["state"] == "COMPLETE").all()
    said = [r.getMessage() for r in caplog.records if "stopped logging" in r.getMessage()]
    assert sorted(m.split(" stopped logging: ")[0] for m in said) == sorted(f"--log {s}" for s in specs)
    assert all("\n" not in m and m.endswith("the search goes on (its run directory holds every trial)") for m in said)
    assert (nas.load_results(tmp_path / "run")["state"] == "COMPLETE").sum() == 4

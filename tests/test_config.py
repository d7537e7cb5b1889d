"""The configuration tree (nas.run.config): flags generated from its fields and grouped, config files with flat or
tabled keys, run.json (format 3) and its identity, format 2 converted, an unknown format refused, and the training
function's identity. No search runs here: see test_cli.py and test_bad_input.py for those."""

from __future__ import annotations

import argparse
import functools
import json
import re
import textwrap
from pathlib import Path

import pytest

import nas
from nas.cli import build_parser, main
from nas.cli.flags import GROUPS, config_from_args, read_config_file
from nas.core.spec import same_function, train_from_spec, train_spec
from nas.run.config import RunConfig
from nas.run.config_tree import leaves

FORMAT2 = Path(__file__).parent / "fixtures" / "run_format2" / "run.json"


def search_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser(["search"])._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["search"]


def test_every_settable_field_is_a_flag_in_its_sections_group():
    groups = {g.title: {a.dest for a in g._group_actions} for g in search_parser()._action_groups}
    settable = [leaf for leaf in leaves(RunConfig) if not leaf.about.fact]
    assert len(settable) > 40  # every TrainSettings field but the search's seed and objectives, too
    for leaf in settable:
        assert leaf.name in groups[GROUPS[leaf.path[0]]], leaf
    assert {"config", "resume", "quiet", "on_interrupt", "keep_dashboard"} <= groups["run"]
    facts = {leaf.name for leaf in leaves(RunConfig) if leaf.about.fact}
    assert facts == {"data_object", "dataset_fingerprint", "executor_class", "created", "resumed",
                     "supernet_sha256", "warm_start_counts"}
    assert not facts & set().union(*groups.values())


def test_search_help_shows_the_groups_with_types_choices_and_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = capsys.readouterr().out
    positions = [out.index(title + ":") for title in GROUPS.values()]
    assert positions == sorted(positions)  # search, training, execution, run
    assert "--optimizer {adam,adamw,sgd}" in out and "--amp, --no-amp" in out and "(default: 24)" in out
    assert "--space-option KEY=VALUE" in out and "--train-function MODULE:FUNCTION" in out


def test_flags_over_a_config_file_with_flat_and_tabled_keys(tmp_path):
    flat, tabled = tmp_path / "flat.toml", tmp_path / "tabled.toml"
    flat.write_text(textwrap.dedent("""
        space = "nb201"
        budget = 7
        epochs = 3
        workers = 1
        [strategy_options]
        population = 5
        [train_options]
        nesterov = true
        optimizer = "sgd"
    """))
    tabled.write_text(textwrap.dedent("""
        [search]
        space = "nb201"
        budget = 7
        strategy_options = {population = 5}
        [train]
        epochs = 3
        [train.settings]
        nesterov = true
        optimizer = "sgd"
        [execution]
        workers = 1
    """))
    assert RunConfig.from_mapping(read_config_file(str(flat))) == RunConfig.from_mapping(read_config_file(str(tabled)))
    args = search_parser().parse_args(["--config", str(flat), "--budget", "9", "-o", "sample_size=2",
                                       "--space-option", "channels=4"])
    cfg = config_from_args(args)
    assert (cfg.search.budget, cfg.search.strategy_options, cfg.search.space_args) == (
        9, {"population": 5, "sample_size": 2}, {"channels": 4})
    assert (cfg.train.settings.epochs, cfg.train.settings.nesterov, cfg.execution.workers) == (3, True, 1)


@pytest.mark.parametrize(("values", "message"), [
    ({"search": {"epochs": 3}}, "unknown config keys ['search.epochs']"),
    ({"epochs": 2, "train": {"epochs": 3}}, "config key 'epochs' is given twice"),
    ({"dataset_fingerprint": "x"}, "unknown config keys ['dataset_fingerprint']"),
    ({"search": 3}, "config key 'search' must be a table (mapping), got 3 (int)"),
    ({"time_budget": 0}, "config key 'time_budget' must be a finite number of seconds > 0 (or none), got 0"),
    ({"time_budget": float("inf")}, "config key 'time_budget' must be a finite number of seconds > 0 (or none), "
                                    "got inf"),  # (status.json would hold Infinity, which is not JSON)
    ({"cpus_per_trial": float("inf")}, "cpus_per_trial must be a finite number > 0, got inf"),
    ({"train_function": 3}, "config key 'train_function' must be a string, got 3 (int)"),
    ({"budget": 10**40}, f"config key 'budget' must be below 2**63 in size, got {10**40}"),  # (status.json's readers
    ({"seed": 2**63}, f"config key 'seed' must be below 2**63 in size, got {2**63}"),  # read 64-bit integers)
    ({"lr": -10**400}, "config key 'lr' must be below 2**63 in size"),
])
def test_config_keys_are_checked_by_name(values, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RunConfig.from_mapping(values)


def test_run_json_round_trips_and_its_identity_is_what_defines_the_run():
    cfg = RunConfig.from_mapping({"space": "nb201", "space_args": {"channels": 4}, "epochs": 3, "seed": 2,
                                  "train_function": "mymod:train", "dataset": "none"})
    saved = json.loads(json.dumps(cfg.to_json()))
    assert saved["format"] == 3 and set(saved) == {"format", "search", "train", "execution", "run_dir", "created",
                                                   "resumed"}
    assert RunConfig.from_json(saved) == cfg and saved["train"]["dataset"] is None
    assert cfg.train.settings.seed == 2  # the run's one seed
    same = cfg.updated({"budget": 99, "workers": 7, "device": "cpu", "threads": 1, "executor": "inprocess"})
    assert cfg.identity().differences(same.identity()) == []
    other = cfg.updated({"epochs": 2, "space_args": {"channels": 8}, "train_function": "builtin"})
    assert cfg.identity().differences(other.identity()) == [
        "space_args: run has {'channels': 4}, this call {'channels': 8}",
        "train_function: run has 'mymod:train', this call 'builtin'", "epochs: run has 3, this call 2"]


@pytest.mark.parametrize(("change", "message"), [
    ({"format": 7}, "written by an incompatible version (format 7; this version reads format 3 and converts format 2)"),
    ({"search": {"budget": "3"}}, "config key 'budget' must be an integer, got '3' (str)"),
    ({"search": {"buget": 3}}, "unknown keys ['search.buget']"),
    ({"search": {"budget": 10**40}}, "config key 'budget' must be below 2**63 in size"),
    ({"train": {"settings": {"epochs": True}}}, "config key 'epochs' must be an integer, got True (bool)"),
    ({"space": "toy"}, "unknown keys ['space']"),
])
def test_a_malformed_run_json_is_one_line_naming_the_file_and_key(tmp_path, capsys, change, message):
    run = tmp_path / "run"
    run.mkdir()
    saved = RunConfig().to_json()
    for key, value in change.items():
        saved[key] = {**saved[key], **value} if isinstance(value, dict) else value
    (run / "run.json").write_text(json.dumps(saved))
    assert main(["results", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'run.json'}: {message}" in err and len(err.strip().splitlines()) == 1, err


def test_format_2_is_converted():
    cfg = RunConfig.from_json(json.loads(FORMAT2.read_text()))
    assert (cfg.search.space, cfg.search.scheduler, cfg.search.scheduler_options["variant"]) == (
        "macro", "asha", "promotion")
    assert (cfg.train.dataset, cfg.train.function, cfg.train.settings.epochs, cfg.execution.executor) == (
        "digits", "builtin", 3, "inprocess")
    assert cfg.train.dataset_fingerprint.startswith("4 arrays") and cfg.created.startswith("2026-12-03")
    assert RunConfig.from_json(cfg.to_json()) == cfg


def top_level(ctx):
    ctx.report(epoch=1, val_acc=0.5)


def test_the_training_function_is_recorded_by_what_can_import_it_again():
    assert train_spec(None) == train_spec(nas.fit) == "builtin"
    assert train_spec(top_level) == f"{__name__}:top_level" and train_from_spec(train_spec(top_level)) is top_level
    assert re.fullmatch(r"custom, not importable \(scored\('len'\); code [0-9a-f]{12}\)", train_spec(nas.scored(len)))
    assert train_spec(lambda ctx: None).startswith(f"custom, not importable ({__name__}:")
    for spec, message in [("os:system", "names a module of Python's standard library"),
                          ("json:dumps", "names a module of Python's standard library"),
                          ("nas.core.space:SearchSpace", "names a type"), ("no_such_module:train", "cannot import"),
                          ("custom, not importable (x)", "the training function is custom, not importable")]:
        with pytest.raises(ValueError, match=message):
            train_from_spec(spec)


def closure(k):
    def train(ctx):
        ctx.report(epoch=1, val_acc=k)
    return train


class Scaled:
    def __init__(self, k):
        self.k = k

    def __call__(self, ctx):
        ctx.report(epoch=1, val_acc=self.k)

    def train(self, ctx):
        ctx.report(epoch=1, val_acc=self.k)


def scaled(ctx, k=1.0):
    ctx.report(epoch=1, val_acc=k / 2)


def test_a_custom_training_function_is_known_by_what_it_computes_with_and_no_address():
    """A partial or a bound method was recorded with its address, so even the same one could not resume its run;
    two closures of other values, two lambdas, two objects of one class were the same to a resume."""
    pairs = [(closure(0.06), closure(0.6)), (lambda ctx: 0.1, lambda ctx: 0.9), (Scaled(0.4), Scaled(0.02)),
             (functools.partial(scaled, k=1.5), functools.partial(scaled, k=2)), (Scaled(1).train, Scaled(2).train)]
    for a, b in pairs:
        assert train_spec(a) != train_spec(b) and " at 0x" not in train_spec(a)
    for same in (lambda: closure(0.06), lambda: Scaled(0.4), lambda: functools.partial(scaled, k=1.5),
                 lambda: Scaled(1).train, lambda: nas.scored(len)):
        assert train_spec(same()) == train_spec(same())
    assert same_function("custom, not importable (scored('len'))", train_spec(nas.scored(len)))  # (an older run)
    assert not same_function("custom, not importable (scored('len'))", train_spec(nas.scored(abs)))


def test_an_api_resume_goes_on_only_with_the_same_custom_function(tmp_path):
    run = tmp_path / "run"
    common = dict(strategy="random", executor="inprocess", data=None, run_dir=run)
    nas.search("toy", budget=2, train=functools.partial(scaled, k=1.5), **common)
    with pytest.raises(ValueError, match=r"it is a different search \(train_function: run has 'custom, not "
                                         r"importable \(functools.partial of test_config:scaled; code "):
        nas.search("toy", budget=3, train=functools.partial(scaled, k=2), resume=True, **common)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match="train_function: run has"):
        nas.search("toy", budget=3, train=closure(0.5), resume=True, **common)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # (a refusal changes nothing)
    df = nas.search("toy", budget=3, train=functools.partial(scaled, k=1.5), resume=True, **common)
    assert len(df) == 3 and set(df.score) == {0.75}


def test_retrain_trains_with_the_searchs_own_function(tmp_path, capsys):
    """It trained with the built-in trainer whatever the search trained with: digits accuracy in place of the
    user's scores, with no word said."""
    from nas.oneshot import retrain

    common = dict(strategy="random", executor="inprocess", budget=2, data="digits")
    nas.search("toy", train=top_level, run_dir=tmp_path / "a", **common)
    out = retrain(tmp_path / "a", epochs=1, executor="inprocess")
    assert list(out.score) == [0.5]
    nas.search("toy", train=functools.partial(scaled, k=1.5), run_dir=tmp_path / "b", **common)
    assert main(["retrain", str(tmp_path / "b"), "--executor", "inprocess"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trained with a function that is custom, not importable (functools.partial of " in err[0]
    assert err[0].endswith(f"retrain it from Python with the same one: nas.retrain({str(tmp_path / 'b')!r}, "
                           "train=<that function>)")
    out = retrain(tmp_path / "b", epochs=1, executor="inprocess", train=functools.partial(scaled, k=1.5))
    assert list(out.score) == [0.75]


def test_one_seed_and_one_list_of_objectives(tmp_path):
    from nas.api import configure

    with pytest.raises(ValueError, match="settings.seed 5 and seed 3 differ: a run has one seed"):
        configure("toy", settings=nas.TrainSettings(seed=5), seed=3)
    cfg, _ = configure("toy", settings=nas.TrainSettings(seed=5, objectives=("val_loss:min",)), epochs=2)
    assert (cfg.search.seed, cfg.train.settings.seed, cfg.search.objectives, cfg.train.settings.epochs) == (
        5, 5, ["val_loss:min"], 2)


def test_a_retraining_names_the_search_trial_each_architecture_came_from(tmp_path, capsys):
    """(Its trials are numbered from 0 in the order asked: retrain trial 0 was search trial 3, said nowhere.)"""
    from nas.oneshot import retrain
    from nas.search_spaces.toy import toy_score
    from nas.train.simple import scored

    df = nas.search("toy", "random", budget=8, executor="inprocess", data=None, train=scored(toy_score), seed=0,
                    run_dir=tmp_path / "run", progress=False)
    best = df.sort_values("score", ascending=False, kind="stable").trial_id.head(3).tolist()
    assert best != [0, 1, 2]
    out = retrain(tmp_path / "run", top=3, executor="inprocess", data=None, train=scored(toy_score))
    assert out.sort_values("trial_id").search_trial.tolist() == best
    assert (out.set_index("search_trial").arch == df.set_index("trial_id").arch.loc[best]).all()

"""Bad input to ``nas bench ...``: one line naming the flag and the value as typed, exit 2, before any work starts
and before any output folder is made."""

from __future__ import annotations

import pytest

from nas.cli import main


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(["bench", *argv])
    except SystemExit as e:  # (the parser's refusal: usage and one line)
        code = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith(("usage:", " "))]
    assert code == 2 and len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv, message", [
    (["overhead", "--address", ""], "argument --address: '' is empty; give a value"),
    (["ray-poll", "--address", " "], "argument --address: ' ' is empty; give a value"),
    (["train", "--arch", ""], "argument --arch: '' is empty; give a value"),
    (["warm-start", "--quick", "--options", ""], "argument --options: '' is empty; give a value"),
    (["strategy-speed", "--strategies", ""], "argument --strategies: '' is empty; give a value"),
    (["strategies", "--strategies", ""], "argument --strategies: '' is empty; give a value"),
    (["strategies", "-o", ""], "argument -o/--option: '' is empty; give a value"),
    (["strategies", "--strategies", ","], "--strategies ',' has an empty item; give comma-separated values"),
    (["strategies", "--strategies", "random,,evolution"], "--strategies 'random,,evolution' has an empty item"),
    (["optimum", "--strategies", "random,"], "--strategies 'random,' has an empty item"),
    (["driver", "--workers", "1", "--trials", "10", "--strategy", "nosuch"],
     "--strategy: unknown strategy 'nosuch'; known: "),
    (["driver", "--strategy", ""], "argument --strategy: '' is empty; give a value"),
    (["warm-start", "--quick", "--strategy", "nosuch"], "--strategy: unknown strategy 'nosuch'; known: "),
    (["importance", "--sizes", "1000x0"], "--sizes takes TRIALSxDECISIONS pairs of at least 2 trials and 1 "
                                          "decision, e.g. 1000x50; got '1000x0'"),
    (["importance", "--sizes", "1000,x5"], "got '1000'"),
    (["importance", "--choices", "1"], "--choices must be >= 2, got 1"),
    (["importance", "--noise", "nan"], "--noise must be a finite number >= 0, got nan"),
])
def test_blank_values_and_unknown_strategies_are_refused_up_front(tmp_path, capsys, argv, message):
    assert message in refused([*argv, *(["--out", str(tmp_path / "out")] if argv[0] == "strategies"
                                        else [])], capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, message", [
    (["strategies", "--noise", "inf"], "--noise must be a finite number of accuracy points >= 0, got inf"),
    (["strategies", "--noise", "nan"], "--noise must be a finite number of accuracy points >= 0, got nan"),
    (["strategies", "--noise", "-1"], "--noise must be a finite number of accuracy points >= 0, got -1"),
    (["scaling", "--noise", "-1"], "--noise must be a finite number of accuracy points >= 0, got -1"),
    (["strategies", "-o", "noequals"], "-o 'noequals' is not STRATEGY.KEY=VALUE"),
    (["strategies", "-o", "=x"], "-o '=x' is not STRATEGY.KEY=VALUE"),
    (["strategies", "-o", ".k=1"], "-o '.k=1' is not STRATEGY.KEY=VALUE"),
    (["strategies", "-o", "random.=1"], "-o 'random.=1' is not STRATEGY.KEY=VALUE"),
    (["strategies", "-o", "nosuch.x=1"], "-o 'nosuch.x=1': strategy 'nosuch' is not in this run (random)"),
    (["strategies", "-o", "evolution.population=5"], "-o 'evolution.population=5': strategy 'evolution' is not in"),
    (["strategies", "-o", "random.dedup=abc"], "-o random: dedup must be true or false, got 'abc'"),
    (["strategies", "-o", "random.x=1"], "-o random: unknown options ['x'] for strategy 'random'"),
    (["scaling", "--strategy", "random", "-o", "evolution.population=5"],
     "-o 'evolution.population=5': strategy 'evolution' is not in this run (random)"),
])
def test_simulation_options_are_checked_before_the_out_folder_is_made(tmp_path, capsys, argv, message):
    if argv[0] == "strategies":
        argv = [*argv, "--strategies", "random"]
    assert message in refused([*argv, "--seeds", "1", "--jobs", "1", "--out", str(tmp_path / "out")], capsys)
    assert not (tmp_path / "out").exists()


def test_optimum_refuses_an_option_of_a_strategy_not_in_its_run(capsys):
    assert "-o 'evolution.population=5': strategy 'evolution' is not in this run (local)" in refused(
        ["optimum", "--strategies", "local", "-o", "evolution.population=5", "--seeds", "1", "--jobs", "1"], capsys)


@pytest.mark.parametrize("command", [
    ["cli-latency", "--trials", "2", "--repeats", "1"], ["inherit-search", "--quick"], ["train"],
    ["inherit", "--quick"],
    ["warm-start", "--quick"], ["cells"], ["proxies"], ["supernet", "--quick"], ["gang"],
])
@pytest.mark.parametrize("path, message", [
    ("/dev/full", "cannot write '/dev/full': No space left on device"),
    ("{tmp}", "it is a directory; name a file"),
    ("{tmp}/no/such/figures.json", "there is no folder"),
])
def test_json_outputs_are_checked_before_the_benchmark_runs(tmp_path, capsys, command, path, message):
    line = refused([*command, "--json", path.format(tmp=tmp_path)], capsys)
    assert "argument --json: cannot write " in line and message in line


@pytest.mark.parametrize("argv, message", [
    (["report-cost", "--trials", "2", "--epochs", "2", "--workers", "1", "--repeats", "-1"],
     "--repeats must be >= 1, got -1"),
    (["report-cost", "--epochs", "1"], "--epochs must be >= 2, got 1"),
    (["warm-start", "--quick", "--options", "{bad"], "--options must be a JSON object, got '{bad' ("),
    (["warm-start", "--quick", "--options", "[1]"], "--options must be a JSON object, got '[1]'"),
])
def test_messages_name_the_flag_and_the_value_as_typed(capsys, argv, message):
    assert f"nas bench: error: {message}" in refused(argv, capsys)


def test_a_flag_given_beside_quick_keeps_its_value(tmp_path, capsys):
    # (--quick set 3 seeds over --seeds 5 unsaid)
    code = main(["bench", "strategies", "--quick", "--strategies", "random", "--seeds", "5", "--jobs", "1",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "3000 simulated s, 1 worker(s), 5 seeds" in out and "5 runs in" in out
    code = main(["bench", "strategies", "--quick", "--strategies", "random", "--time-budget", "2000", "--jobs", "1",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "2000 simulated s, 1 worker(s), 3 seeds" in out


def test_quick_fills_the_flags_not_given():
    from argparse import Namespace

    from nas_benchmarks.harness import apply_quick

    args = Namespace(quick=True, seeds=100, budget=50, given={"budget"})
    apply_quick(args, seeds=2, budget=10)
    assert (args.seeds, args.budget) == (2, 50)
    args = Namespace(quick=False, seeds=100)
    apply_quick(args, seeds=2)
    assert args.seeds == 100


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_proxy_cache_that_is_no_regular_file_is_refused_up_front(tmp_path, capsys, kind):
    """(A folder, a FIFO or /dev/full was taken: a warm-up would fail in pandas, wait on the pipe, or read zeros.)"""
    import os

    cache = {"folder": tmp_path / "cache", "fifo": tmp_path / "cache", "device": "/dev/full"}[kind]
    if kind == "folder":
        os.mkdir(cache)
    elif kind == "fifo":
        os.mkfifo(cache)
    said = refused(["strategies", "--strategies", "random", "--proxy-cache", str(cache), "--out",
                    str(tmp_path / "out")], capsys)
    assert said.endswith(f"--proxy-cache {str(cache)!r} is no regular file (a folder, a pipe or a device, which a "
                         "warm-up would wait on or read forever); name the CSV nas bench proxies wrote"), said
    assert not (tmp_path / "out").exists()

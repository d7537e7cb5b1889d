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
])
def test_blank_values_and_unknown_strategies_are_refused_up_front(tmp_path, capsys, argv, message):
    assert message in refused([*argv, *(["--out", str(tmp_path / "out")] if argv[0] == "strategies"
                                        else [])], capsys)
    assert not (tmp_path / "out").exists()

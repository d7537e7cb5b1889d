"""Terminal output that fits and pictures of any architecture: `nas results` on an 80-column terminal, its arch
view, `nas best` as a block, no traceback when the reader of a pipe goes away, `nas best --draw` of a macro run
and the graph of a user space's module."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import nas
from nas.cli import main
from nas.core.space import SearchSpace, Task
from nas.monitor.archgraph import module_graph, to_dot
from nas.train.settings import TrainSettings


@pytest.fixture(scope="module")
def macro_run(tmp_path_factory):
    """Three macro CNNs trained one epoch on digits, in process: architectures far wider than 80 columns."""
    path = tmp_path_factory.mktemp("views") / "run"
    nas.search(space="macro", strategy="random", budget=3, executor="inprocess", seed=0, run_dir=path,
               settings=TrainSettings(epochs=1, batch_size=256, seed=0, measure_costs=False))
    return path


def test_results_fit_80_columns_and_the_arch_has_its_own_view(macro_run, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["results", str(macro_run)]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80, out
    assert out.splitlines()[0].split()[:2] == ["trial", "val_acc"]
    assert f"nas results {macro_run} --view arch" in out  # the arch did not fit: where it is
    assert main(["results", str(macro_run), "--view", "arch"]) == 0
    view = capsys.readouterr().out
    assert max(map(len, view.splitlines())) <= 80 and view.count("trial ") == 3


def test_best_is_a_readable_block(macro_run, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["best", str(macro_run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("best trial ") and lines[1].split()[0] == "val_acc" and "(max)" in lines[1]
    assert lines[2].split()[0] == "architecture" and max(map(len, lines)) <= 80
    assert not any(line.lstrip().startswith("{") for line in lines)  # no raw JSON line


def test_no_broken_pipe_traceback(macro_run):
    env = {**os.environ, "COLUMNS": "80"}
    for args in (["results", "--view", "arch"], ["results", "--format", "json"], ["best"], ["status"],
                 ["best", "--pareto"]):
        proc = subprocess.run(f"{sys.executable} -m nas.cli {args[0]} {macro_run} {' '.join(args[1:])} | head -1",
                              shell=True, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_a_reader_gone_before_the_first_line_ends_the_command_quietly(macro_run):
    """The pipe's reader closed before the command wrote (it imports for a second first): every write fails, as
    `nas status RUN | head -3` made it fail with a BrokenPipeError traceback."""
    for args in (["status"], ["results"], ["best"]):
        proc = subprocess.Popen([sys.executable, "-m", "nas.cli", args[0], str(macro_run)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 0 and err == "", (args, err)


def test_best_draw_writes_the_macro_module_graph(macro_run, tmp_path, capsys):
    html, dot = tmp_path / "best.html", tmp_path / "best.dot"
    assert main(["best", str(macro_run), "--draw", str(html)]) == 0
    assert main(["best", str(macro_run), "--draw", str(dot)]) == 0
    page = html.read_text()
    assert '<script src="http' not in page and "Conv2d" in page and "Linear" in page  # offline: the JS inside
    text = dot.read_text()
    assert text.startswith('digraph "trial ') and "Conv2d 1->" in text and "->" in text
    assert main(["best", str(macro_run), "--draw", str(tmp_path / "best.png")]) == 2  # one line, exit 2
    assert "--draw writes .html" in capsys.readouterr().err


class Branchy(SearchSpace):
    """A user space whose module has a skip connection (an ``add`` node reading two branches)."""

    def dims(self):
        return {"width": [4, 8], "act": ["relu", "gelu"]}

    def build(self, arch, task):
        return _Net(arch["width"], arch["act"], task)


class _Net(nn.Module):
    def __init__(self, width: int, act: str, task: Task) -> None:
        super().__init__()
        self.stem = nn.Conv2d(task.input_shape[0], width, 3, padding=1)
        self.branch = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU() if act == "relu" else nn.GELU())
        self.head = nn.Linear(width, task.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = y + self.branch(y)
        return self.head(y.mean((2, 3)))


def test_a_user_space_module_is_drawn_as_its_graph():
    model = Branchy().build({"width": 8, "act": "gelu"}, Task((1, 8, 8), 10))
    graph = module_graph(model)
    assert graph.traced
    labels = {n.name: n.label for n in graph.nodes}
    add = next(n for n in graph.nodes if n.label == "add")
    assert set(add.inputs) == {"stem", "branch_1"}  # the skip connection: two inputs
    assert labels["branch_1"] == "GELU" and labels["head"] == "Linear 8->10"
    assert graph.depths()["head"] > graph.depths()["add"]
    assert '"stem" -> "add"' in to_dot(graph)

"""The registry of experiments (``nas_benchmarks.EXPERIMENTS``) that ``nas bench`` reads: each is listed by
``nas bench --help`` with the one-line summary its docstring starts with; the benchmarks import no module of their
own in a circle, and none shares a name with a module of the product."""

from __future__ import annotations

import ast
import graphlib
import pkgutil
from pathlib import Path

import pytest

import nas
import nas_benchmarks
from nas.cli import main
from nas.monitor.listing import plain
from nas_benchmarks import EXPERIMENTS, command, experiments


def test_nas_bench_help_lists_every_registered_experiment(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per subcommand: argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    modules = experiments()
    assert [m.__name__ for m in modules] == [f"nas_benchmarks.{name}" for name in EXPERIMENTS]
    text = " ".join(out.split())  # a long name puts its help on the next line
    where = [text.find(f" {name} {plain(summary)} ") for name, summary in (command(m.__doc__) for m in modules)]
    assert -1 not in where and where == sorted(where)  # each, with its summary, in the registry's order
    assert len({command(m.__doc__)[0] for m in modules}) == len(EXPERIMENTS) > 10


def test_an_experiment_docstring_must_name_its_command():
    assert command("``nas bench cells``: cells trained.\n\nMore.") == ("cells", "cells trained")
    with pytest.raises(ValueError, match=r"must start with ``nas bench NAME``: SUMMARY\., got 'Cells, trained\.'"):
        command("Cells, trained.\n\nMore.")


def _modules(package) -> list[str]:
    return [info.name.rpartition(".")[2] for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]


def test_no_benchmark_module_shares_a_name_with_a_module_of_the_product():
    product = set(_modules(nas)) | {m.name for pkg in ("strategies", "search_spaces")
                                    for m in pkgutil.iter_modules([str(Path(nas.__file__).parents[1] / pkg)])}
    assert not set(_modules(nas_benchmarks)) & product


def test_the_benchmarks_import_each_other_without_a_circle():
    graph: dict[str, set[str]] = {}
    for path in Path(nas_benchmarks.__file__).parent.glob("*.py"):
        imports = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("nas_benchmarks")):
                module = (node.module or "").removeprefix("nas_benchmarks").lstrip(".")
                imports.add(module or "__init__")
    graph["__init__"].discard("__init__")
    assert graph["harness"] <= {"__init__"} and "nb201_mo" in graph["nb201_strategies"]  # the graph was read
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError on a circle

"""The registry of tabular benchmarks (``nas.core.registry.tables``): the simulated executor resolves every
registered name (``SimulatedExecutor.from_config``) and runs a search on it; an unknown name is one line."""

from __future__ import annotations

import pytest

from nas.core.registry import spaces, tables
from nas.engine.loop import SearchLoop
from nas.engine.protocol import ExecutorConfig, build_executor
from nas.strategies.random import RandomSearch


@pytest.mark.parametrize("name", tables.names())
def test_the_simulated_executor_resolves_every_registered_table(name):
    expected = tables.get(name)()
    space = spaces.get(expected.space)()
    ex = build_executor("simulated", ExecutorConfig(space, options={"benchmark": name}, seed=0))
    assert repr(ex.benchmark) == repr(expected) and ex.epochs == expected.epochs
    results = SearchLoop(RandomSearch(space, seed=0), ex, budget=6).run()
    assert len(results) == 6 and all(r.ok and r.end_time > 0 for _, r in results)
    for trial, result in results:  # the answers are the table's
        assert result.score == pytest.approx(expected.query(trial.arch)[0])


def test_the_default_table_is_nas_bench_201_on_cifar10():
    ex = build_executor("simulated", ExecutorConfig(spaces.get("nb201")()))
    assert repr(ex.benchmark) == "NB201Fidelities(dataset='cifar10')" and "nb201-cifar10" in tables.names()


def test_an_unknown_table_is_refused_naming_the_known_ones():
    known = ", ".join(tables.names())
    near = r"( \(did you mean '[^']+'\?\))?"
    with pytest.raises(ValueError, match=f"^unknown tabular benchmark 'nb201-mnist'{near}; known: {known}$"):
        build_executor("simulated", ExecutorConfig(spaces.get("nb201")(), options={"benchmark": "nb201-mnist"}))

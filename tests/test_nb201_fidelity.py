"""The two fidelities of the NAS-Bench-201 table (12 and 200 epochs) a simulated executor answers rungs from."""

from __future__ import annotations

import numpy as np
import pytest

from nas.engine.tabular.nb201_table import FIDELITY_EPOCHS, NB201Benchmark, load_table, query_epochs, step_epochs
from nas.search_spaces.nb201 import NB201Space


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100", "imagenet16"])
def test_both_fidelities_against_the_table_and_the_12_epoch_protocol(dataset):
    table, bench = load_table(), NB201Benchmark(dataset)
    space, rng = NB201Space(), np.random.default_rng(0)
    for _ in range(20):
        arch = space.sample(rng)
        i = table.row(arch)
        r12, s12, m12 = query_epochs(arch, 12, dataset=dataset)
        assert (r12, s12) == pytest.approx(bench.query(arch)[:2])  # the 12-epoch rung is the usual protocol
        r200, s200, m200 = query_epochs(arch, 200, dataset=dataset)
        assert r200 == pytest.approx(table.valid200[dataset][i] / 100) == pytest.approx(m200["valid_acc_200"] / 100)
        assert s200 == table.time200[dataset][i]  # charged its FULL 200-epoch time
        assert s12 / s200 == pytest.approx(12 / 200)
        assert (m12["epochs"], m200["epochs"], m12["index"]) == (12, 200, i)
        assert (m12["val_acc"], m200["val_acc"]) == (r12, r200)
        assert m12["params"] == m200["params"] > 0 and m12["latency_ms"] == m200["latency_ms"] > 0
        seeds = table.seeds200[dataset][i]
        assert [query_epochs(arch, 200, dataset=dataset, seed=k)[0] for k in range(len(seeds) + 1)] == \
            pytest.approx([v / 100 for v in (*seeds, seeds[0])])


def test_steps_map_to_the_two_schedules_and_bad_input_is_one_line():
    assert [step_epochs(s) for s in (1, 2)] == list(FIDELITY_EPOCHS) == [12, 200]
    for bad in (0, 3, True):
        with pytest.raises(ValueError, match=r"two fidelities, steps 1 \(12 epochs\) and 2 \(200 epochs\)"):
            step_epochs(bad)
    arch = NB201Space().sample(np.random.default_rng(1))
    with pytest.raises(ValueError, match="NAS-Bench-201 answers at 12 or 200 epochs, got 50"):
        query_epochs(arch, 50)
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        query_epochs(arch, 12, dataset="mnist")

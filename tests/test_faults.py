"""Faults survived on a real Ray cluster: killed trainer actors, an unplaceable replacement, a node that
leaves a multi-node cluster. Each search must finish its budget with every trial journaled exactly once."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

import pytest
import ray

import nas
from nas.engine.protocol import EventKind, KeepRule, finished
from nas.engine.ray_pool import RayExecutor
from nas.run.reader import read_journal
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.random import RandomSearch
from nas.train.simple import scored

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module


def slow_toy_score(arch, seconds=0.4):
    time.sleep(seconds)  # (the node test's trials: long enough for a node's removal to find some running)
    return toy_score(arch)


class BlocksUntilKilled:
    """The toy scoring function, except that the first attempt of each trial in ``block`` says that it runs (its
    worker's pid, through the test's Signal ``started-<id>`` in ``directory``) and then blocks until its
    worker is killed; the retry (its marker present) and every other trial answer at once."""

    def __init__(self, directory, block):
        self.directory, self.block = directory, frozenset(block)

    def __call__(self, ctx):
        trial = ctx.trial
        marker = os.path.join(self.directory, f"attempted-{trial.trial_id}")
        if trial.trial_id in self.block and not os.path.exists(marker):
            open(marker, "w").close()
            with open(os.path.join(self.directory, f"started-{trial.trial_id}"), "w") as f:
                f.write(f"{os.getpid()}\n")
            threading.Event().wait()  # forever: only the kill ends this attempt
        ctx.report(epoch=1, val_acc=toy_score(trial.arch))


def blocking(tmp_path, signals, block):
    """The training function for ``block``, and the Signal of each of its trials (made before the search)."""
    waits = {t: signals(f"started-{t}") for t in block}
    return BlocksUntilKilled(str(tmp_path), block), waits


def accounted_for(df, run_dir, budget):
    """Exactly ``budget`` trials, ids 0..budget-1, each journaled once."""
    journaled = [t.trial_id for t, _ in read_journal(run_dir)]
    assert len(df) == budget and sorted(journaled) == list(range(budget)) == sorted(df.trial_id)


class Killer(nas.Callback):
    """Kills the workers of planned trials while those trials run (blocked in BlocksUntilKilled): each group
    (trial id -> "sigkill" to the actor's process, or "ray.kill") once every trial of it has started."""

    def __init__(self, executor, groups, waits):
        self.executor, self.groups, self.waits, self.blocked, self.killed = executor, groups, waits, {}, []

    def on_event(self, status, event):
        tid = event.trial.trial_id
        if event.kind is not EventKind.STARTED or tid not in self.waits or tid in self.killed or tid in self.blocked:
            return
        self.blocked[tid] = (int(self.waits[tid].wait()), int(event.worker.rsplit("-", 1)[1]))  # (pid, slot)
        group = next(g for g in self.groups if tid in g)
        if group.keys() <= self.blocked.keys():
            for t, how in group.items():
                pid, slot = self.blocked.pop(t)
                if how == "sigkill":
                    os.kill(pid, signal.SIGKILL)
                else:
                    ray.kill(self.executor.actor(slot))
                self.killed.append(t)


@pytest.mark.parametrize(("max_retries", "groups"), [
    (3, [{3: "sigkill"}, {8: "ray.kill"}, {12: "ray.kill", 13: "ray.kill"}]),  # the last two: both workers at once
    (0, [{3: "ray.kill"}]),
])
def test_actors_killed_during_a_search(ray_local, tmp_path, signals, max_retries, groups):
    budget = 20
    train, waits = blocking(tmp_path, signals, [t for g in groups for t in g])
    ex = RayExecutor(ToySpace(), None, workers=2, train=train, max_retries=max_retries,
                     prefetch=False)  # (a blocked trial's worker holds nothing queued)
    killer = Killer(ex, groups, waits)
    try:
        df = nas.search(ToySpace(), "random", budget=budget, executor=ex, seed=0, data=None,
                        run_dir=tmp_path / "run", callbacks=[killer])
    finally:
        ex.shutdown()
    accounted_for(df, tmp_path / "run", budget)
    assert sorted(killer.killed) == sorted(waits) and ex.restarts == len(waits)  # every kill landed mid-trial
    failed = df[df.state == "FAILED"]
    if max_retries:
        assert failed.empty  # every killed trial was retried on a replacement and completed
    else:  # a trial whose worker died is recorded as FAILED at once, and the search goes on
        assert sorted(failed.trial_id) == sorted(waits) and failed.error.str.startswith("worker died 1 times").all()
    assert (df[df.state == "COMPLETE"].score == df[df.state == "COMPLETE"].arch.map(
        lambda a: toy_score(ToySpace().parse(a)))).all()


def test_a_replacement_that_cannot_be_placed_shrinks_the_pool(ray_local, tmp_path, signals, caplog):
    train, waits = blocking(tmp_path, signals, [1])
    ex = RayExecutor(ToySpace(), None, workers=2, train=train, prefetch=False)
    ex.start_timeout = 3  # for replacements (the pool itself may take longer to start on a busy machine)
    hog = None
    try:
        strategy = RandomSearch(ToySpace(), seed=0)
        trials = [strategy.ask() for _ in range(2)]
        for t in trials:
            ex.submit(t, keep=KeepRule())
        pid = int(waits[1].wait())  # trial 1 runs, blocked: kill its worker
        [slot] = [i for i in range(2) if ray.get(ex.actor(i).info.remote())["pid"] == pid]
        ray.kill(ex.actor(slot))

        @ray.remote(num_cpus=1)
        class Hog:
            def ready(self):
                return True

        hog = Hog.remote()
        ray.get(hog.ready.remote())  # the dead worker's CPU is taken: its replacement cannot start
        results = []
        with caplog.at_level(logging.WARNING, logger="nas.engine.ray_pool"):
            while len(results) < 2:
                results += finished(ex.poll(timeout=10))
            assert sorted(t.trial_id for t, _ in results) == [0, 1]
            assert all(r.ok for _, r in results)  # trial 1 ran again, on the worker that is left
            while not ex.retired:  # each poll waits at most until the replacement's deadline
                assert finished(ex.poll(timeout=10)) == []
        assert ex.slots == 1 and ex.retired == [slot] and ex.free_slots() == 1 + ex.prefetch.on  # its load
        assert "not placed and started within 3 s" in caplog.text
    finally:
        ex.shutdown()
        if hog is not None:
            ray.kill(hog)


@pytest.fixture
def cluster():
    """A head and two worker nodes (1 CPU each) on this machine; Ray is left uninitialised after."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()  # the session's ray_local cluster: its fixture starts it again when next asked
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = [c.add_node(num_cpus=1) for _ in range(2)]
    ray.init(address=c.address, logging_level=logging.WARNING, log_to_driver=False)
    c.wait_for_nodes()
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


class NodeRemover(nas.Callback):
    """Once trials have finished on two nodes, removes a worker node that ran some (so holds a trainer
    actor, whose replacement Ray places on the spare node); once the replacement has finished a trial,
    removes the other worker node (now no node can take a replacement, and the pool shrinks)."""

    def __init__(self, cluster, nodes):
        self.cluster, self.nodes, self.removed, self.seen = cluster, nodes, [], []

    def on_result(self, status, trial, result):
        if result.node not in self.seen:
            self.seen.append(result.node)
        if not self.removed and len(self.seen) == 2 and status.finished >= 4:
            self._remove(next(n for n in self.nodes if n.node_id[:12] in self.seen), status)
        elif len(self.removed) == 1 and len(self.seen) == 3:  # the replacement ran a trial on the third node
            self._remove(next(n for n in self.nodes if n is not self.removed[0][0]), status)

    def _remove(self, node, status):
        self.cluster.remove_node(node)
        self.removed.append((node, status.finished, time.time()))


def test_nodes_leave_mid_search_and_it_finishes_on_the_head(cluster, tmp_path):
    c, nodes = cluster
    head = ray.get_runtime_context().get_node_id()[:12]
    budget = 40
    remover = NodeRemover(c, nodes)
    df = nas.search(ToySpace(), "random", budget=budget, workers=2, data=None, train=scored(slow_toy_score), seed=0,
                    max_retries=3,
                    run_dir=tmp_path / "run", callbacks=[remover])
    accounted_for(df, tmp_path / "run", budget)
    assert (df.state == "COMPLETE").all()  # trials on the lost nodes ran again elsewhere
    assert len(remover.removed) == 2 and df.node.nunique() == 3  # on all three nodes, in turn
    last_removal = remover.removed[1][2]
    assert set(df[df.start_time > last_removal].node) == {head}  # the pool shrank to the head

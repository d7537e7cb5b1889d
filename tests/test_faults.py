"""Faults survived on a real Ray cluster: killed trainer actors, an unplaceable replacement, a node that
leaves a multi-node cluster. Each search must finish its budget with every trial journaled exactly once."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import nas
from nas.engine.protocol import EventKind, KeepRule, finished
from nas.engine.ray_pool import RayExecutor
from nas.run.reader import read_journal
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.random import RandomSearch

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module


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


@ray.remote(num_cpus=0)
class Stage:
    """Where the node test stands (an actor on the head, which stays): the worker nodes that finished a trial, the
    ones whose trial blocks (in the order they block; two at most) and whether both have been removed."""

    def __init__(self) -> None:
        self.served: set[str] = set()
        self.blocked: list[str] = []
        self.events = [asyncio.Event(), asyncio.Event()]  # the k-th block happened
        self.gone = asyncio.Event()

    async def serve(self, node: str) -> None:
        self.served.add(node)

    async def block(self, node: str) -> bool:
        """Whether a trial on ``node`` blocks now: its node has finished a trial, and is one of the first two."""
        if node not in self.served or node in self.blocked or len(self.blocked) == 2:
            return False
        self.blocked.append(node)
        self.events[len(self.blocked) - 1].set()
        return True

    async def nth_blocked(self, k: int) -> str:
        await self.events[k].wait()
        return self.blocked[k]

    async def removed(self) -> None:
        self.gone.set()

    async def wait_removed(self) -> None:
        await self.gone.wait()


class HoldsUntilNodesLeave:
    """The toy score, held where the test needs a trial running: on a worker node, its second trial (it has
    finished one) blocks until the node is removed (its retry runs elsewhere); on the head, every trial waits
    until both worker nodes are gone, so each worker node surely runs a trial, then has one cut off."""

    def __init__(self, stage, head: str) -> None:
        self.stage, self.head = stage, head

    def __call__(self, ctx):
        node = ray.get_runtime_context().get_node_id()
        if node == self.head:
            ray.get(self.stage.wait_removed.remote(), timeout=180)
        elif ray.get(self.stage.block.remote(node)):
            threading.Event().wait()  # forever: only the node's removal ends this attempt
        ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))
        ray.get(self.stage.serve.remote(node))


def test_nodes_leave_mid_search_and_it_finishes_on_the_head(cluster, tmp_path):
    """A worker node (holding a trainer actor, whose replacement Ray places on the spare node) is removed while
    a trial runs there; once the replacement has run a trial, the other worker node is removed mid-trial too
    (now no node can take a replacement, and the pool shrinks to the head)."""
    c, nodes = cluster
    head = ray.get_runtime_context().get_node_id()
    stage = Stage.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
    removed: list[tuple[str, float]] = []
    errors: list[BaseException] = []

    def remove_nodes() -> None:
        try:
            for k in (0, 1):
                node_id = ray.get(stage.nth_blocked.remote(k), timeout=180)
                c.remove_node(next(n for n in nodes if n.node_id == node_id))
                removed.append((node_id, time.time()))
            ray.get(stage.removed.remote())
        except BaseException as e:  # (reported by the test below)
            errors.append(e)

    remover = threading.Thread(target=remove_nodes, daemon=True)
    remover.start()
    budget = 40
    df = nas.search(ToySpace(), "random", budget=budget, workers=2, data=None,
                    train=HoldsUntilNodesLeave(stage, head), seed=0, max_retries=3, run_dir=tmp_path / "run")
    remover.join(timeout=60)
    assert not errors, errors
    accounted_for(df, tmp_path / "run", budget)
    assert (df.state == "COMPLETE").all()  # the trials cut off on the lost nodes ran again elsewhere
    assert len(removed) == 2 and df.node.nunique() == 3  # on all three nodes, in turn
    assert {node[:12] for node, _ in removed} == set(df.node) - {head[:12]}
    assert set(df[df.start_time > removed[1][1]].node) == {head[:12]}  # the pool shrank to the head
    ray.kill(stage)

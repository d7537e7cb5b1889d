"""The gangs of a :class:`nas.engine.gang_executor.GangExecutor`: each a placement group and its ranks
(:class:`nas.engine.gang_actor.GangMember`), started, torn down, rebuilt and retired here; which trial a gang runs
is the executor's business.

A gang starts without the driver waiting: one placement group of ``ranks`` bundles (``strategy``), a rank actor in
each bundle, rank 0 asked for an address and every rank's setup (joining the process group there) queued behind it;
it is ready once every setup is in (:meth:`GangPool.check_starting`). One that dies while starting is started
again, up to :attr:`GangPool.START_ATTEMPTS` times in a row; one that does not start within ``start_timeout``, or
that the cluster no longer has room for, is retired.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import ray
import ray.exceptions
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from nas.engine.gang_actor import GangMember

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Gang:
    """One gang: index ``g``, its rank actors and placement group; ``nodes`` once started (each rank's node)."""

    index: int
    actors: list[Any]
    pg: Any
    ready: list[Any]  # each rank's setup, while the gang starts
    deadline: float
    nodes: list[str] = dataclasses.field(default_factory=list)
    failed_starts: int = 0  # in a row


@dataclasses.dataclass(frozen=True)
class GangSpec:
    """What every gang is made of: ``ranks`` actors of ``cpus`` CPUs and ``gpus`` GPUs each, placed by ``strategy``,
    joined over ``backend`` with collectives that wait ``collective_timeout`` seconds at most; ``member_args``: what
    each rank's actor is built with after its name, gang, rank and world (space, data, settings, train function,
    threads); ``member``: the rank actor class (default :class:`nas.engine.gang_actor.GangMember`; another has its
    constructor and its ``address`` and ``setup`` methods)."""

    ranks: int
    strategy: str
    cpus: float
    gpus: float
    backend: str
    collective_timeout: float
    member_args: tuple[Any, ...]
    name_prefix: str = "nas-gang"
    namespace: str | None = None
    member: Any = None

    def needs(self, gangs: int) -> tuple[float, float]:
        """CPUs and GPUs that ``gangs`` gangs hold."""
        return gangs * self.ranks * self.cpus, gangs * self.ranks * self.gpus

    def names(self, g: int) -> list[str]:
        return [f"{self.name_prefix}-{g}-rank-{r}" for r in range(self.ranks)]


def check_placeable(spec: GangSpec) -> None:
    """Refuse a strict gang strategy that no node of the cluster can place (it waited ``start_timeout``, then
    failed)."""
    nodes = [(n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive")]
    if (refusal := placement_refusal(spec, nodes)) is not None:
        raise ValueError(refusal)


def placement_refusal(spec: GangSpec, nodes: list[tuple[float, float]]) -> str | None:
    """Why a gang of ``spec`` cannot be placed on nodes of these (CPUs, GPUs), where its strategy is strict:
    STRICT_SPREAD wants a node of its own for each rank, STRICT_PACK one node for all of them; None where it can.

    >>> spec = GangSpec(2, "STRICT_PACK", 1.0, 0.0, "gloo", 60.0, ())
    >>> print(placement_refusal(spec, [(1.0, 0.0), (1.0, 0.0)]))  # doctest: +NORMALIZE_WHITESPACE
    gang_strategy STRICT_PACK puts a gang's 2 ranks on one node; no node of the Ray cluster has room for 2 x 1 CPUs:
    use PACK or SPREAD, or fewer trial_workers
    >>> spread = dataclasses.replace(spec, strategy="SPREAD")
    >>> placement_refusal(spec, [(2.0, 0.0)]), placement_refusal(spread, [(1.0, 0.0)])
    (None, None)
    """
    holds = [min(cpu // spec.cpus, gpu // spec.gpus if spec.gpus else spec.ranks) for cpu, gpu in nodes]  # ranks
    if spec.strategy == "STRICT_SPREAD" and sum(h >= 1 for h in holds) < spec.ranks:
        return (f"gang_strategy STRICT_SPREAD puts each of a gang's {spec.ranks} ranks on a node of its own; the Ray "
                f"cluster has {sum(h >= 1 for h in holds)} node(s) with room for one: use SPREAD or PACK, or fewer "
                f"trial_workers")
    if spec.strategy == "STRICT_PACK" and not any(h >= spec.ranks for h in holds):
        return (f"gang_strategy STRICT_PACK puts a gang's {spec.ranks} ranks on one node; no node of the Ray cluster "
                f"has room for {spec.ranks} x {spec.cpus:g} CPUs{f' and {spec.gpus:g} GPUs' if spec.gpus else ''}: "
                f"use PACK or SPREAD, or fewer trial_workers")
    return None


class GangPool:
    """``count`` gangs of ``spec``, started at once; the constructor waits until all are up (at most
    ``start_timeout`` seconds). ``wake`` is called (on Ray's thread) when a gang being rebuilt has news."""

    START_ATTEMPTS = 3  # starts in a row that may fail (a rank dies while starting) before a gang is retired

    def __init__(self, count: int, spec: GangSpec, *, start_timeout: float, wake: Callable[[], None]) -> None:
        self.spec, self.start_timeout, self._wake = spec, start_timeout, wake
        self.gangs: list[Gang | None] = [None] * count
        self.free: dict[int, None] = {}  # gangs that take a trial now
        self.starting: dict[int, Gang] = {}
        self.restarts = 0
        self.retired: list[int] = []
        try:
            for g in range(count):
                self._start(g)
            infos = ray.get([ref for gang in self.starting.values() for ref in gang.ready], timeout=start_timeout)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
            self.shutdown()
            if isinstance(e, ray.exceptions.GetTimeoutError):  # (a cluster without the room: said in one line)
                raise TimeoutError(f"the gangs' actors were not placed and started within {start_timeout:g} s "
                                   f"(start_timeout): the cluster lacks room") from None
            raise RuntimeError(f"the gangs' actors failed to start: {e}") from None
        except BaseException:  # (Ctrl-C or SIGTERM while they start: none is left behind on a joined cluster)
            self.shutdown()
            raise
        for g, gang in sorted(self.starting.items(), reverse=True):  # (gang 0 is handed out first)
            gang.nodes = [info["node"][:12] for info in infos[g * spec.ranks:(g + 1) * spec.ranks]]
            self.free[g] = None
        self.starting.clear()

    @property
    def slots(self) -> int:
        """Gangs not retired."""
        return len(self.gangs) - len(self.retired)

    def current(self, gang: Gang) -> bool:
        """Whether ``gang`` is still gang ``g`` (not torn down and rebuilt since)."""
        return self.gangs[gang.index] is gang

    def take(self) -> Gang:
        """A free gang, now busy (:meth:`release` frees it)."""
        gang = self.gangs[self.free.popitem()[0]]
        assert gang is not None  # (a free gang is a live one)
        return gang

    def release(self, gang: Gang) -> None:
        if self.current(gang):
            self.free[gang.index] = None

    def _start(self, g: int) -> Gang:
        s = self.spec
        bundle = {"CPU": s.cpus, **({"GPU": s.gpus} if s.gpus else {})}
        pg = placement_group([bundle] * s.ranks, strategy=s.strategy, name=f"{s.name_prefix}-{g}")
        threads = max(1, math.floor(s.cpus))
        actors = [(s.member or GangMember).options(  # type: ignore[attr-defined,union-attr]
            name=name, namespace=s.namespace, num_cpus=s.cpus, num_gpus=s.gpus, max_concurrency=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r),
        ).remote(name, g, r, s.ranks, *s.member_args, threads) for r, name in enumerate(s.names(g))]
        address = actors[0].address.remote()  # (each rank's setup waits for it; the driver does not)
        ready = [a.setup.remote(address, s.backend, s.collective_timeout) for a in actors]
        gang = self.gangs[g] = self.starting[g] = Gang(g, actors, pg, ready, time.monotonic() + self.start_timeout)
        for ref in ready:
            ref.future().add_done_callback(lambda _: self._wake())
        return gang

    def next_deadline(self) -> float | None:
        """When the first gang being started must be up (time.monotonic), or None."""
        return min((gang.deadline for gang in self.starting.values()), default=None)

    def check_starting(self) -> None:
        """Free the gangs that are up; start again those that died starting; retire those past their deadline."""
        for g, gang in list(self.starting.items()):
            done, _ = ray.wait(gang.ready, num_returns=len(gang.ready), timeout=0)
            if len(done) == len(gang.ready):
                del self.starting[g]
                try:
                    gang.nodes = [info["node"][:12] for info in ray.get(gang.ready)]
                except ray.exceptions.RayError as e:  # (placed on a node that was leaving, say): again, a few times
                    if gang.failed_starts + 1 >= self.START_ATTEMPTS:
                        self._retire(g, f"a rank died while it started, {self.START_ATTEMPTS} times in a row: "
                                        f"{type(e).__name__}")
                    else:
                        self.rebuild(gang, failed_starts=gang.failed_starts + 1)
                    continue
                self.free[g] = None
            elif time.monotonic() >= gang.deadline:
                del self.starting[g]
                self._retire(g, f"it was not placed and started within {self.start_timeout:g} s")

    def rebuild(self, gang: Gang, failed_starts: int = 0) -> None:
        """Tear ``gang`` down and start it again (once: a gang already rebuilt is left alone), or retire it when
        the cluster no longer has room for every gang."""
        if not self.current(gang):
            return
        g = gang.index
        self._kill(gang)
        self.free.pop(g, None)
        self.restarts += 1
        cluster = ray.cluster_resources()
        need_cpu, need_gpu = self.spec.needs(self.slots)
        if need_cpu > cluster.get("CPU", 0) + 1e-9 or need_gpu > cluster.get("GPU", 0) + 1e-9:
            self._retire(g, f"the cluster has {cluster.get('CPU', 0):g} CPUs and {cluster.get('GPU', 0):g} GPUs, "
                            f"the gangs need {need_cpu:g} and {need_gpu:g}")
            return
        self._start(g).failed_starts = failed_starts

    def _retire(self, g: int, why: str) -> None:
        gang = self.gangs[g]
        if gang is not None:
            self._kill(gang)
        self.gangs[g] = None
        self.free.pop(g, None)
        self.retired.append(g)
        log.warning("gang %s-%d could not be rebuilt (%s): %d gangs left", self.spec.name_prefix, g, why, self.slots)

    @staticmethod
    def _kill(gang: Gang) -> None:
        for actor in gang.actors:
            with contextlib.suppress(Exception):  # already dead is what we expect
                ray.kill(actor, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(gang.pg)

    def shutdown(self) -> None:
        for gang in self.gangs:
            if gang is not None:
                self._kill(gang)
        self.gangs = [None] * len(self.gangs)
        self.starting.clear()
        self.free.clear()


__all__ = ["Gang", "GangPool", "GangSpec", "check_placeable", "placement_refusal"]

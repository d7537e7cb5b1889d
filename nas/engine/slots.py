"""How many trials each worker of an executor holds, and which can take one more: the book both the Ray executor's
pool (:class:`nas.engine.ray_workers.TrainerPool`) and the simulated executor keep.

A worker's load is the trials it holds: the one running and, where prefetch is on, one queued behind it. The
workers holding none and those holding one are listed apart, so counting the free slots and taking one is O(1)
whatever the pool's size. A worker that is not up (starting, being replaced, retired) is listed nowhere.
"""

from __future__ import annotations


class SlotLoads:
    """The loads of ``n`` workers, all up and idle (``up=True``) or none listed yet (each is listed by
    :meth:`list_free` once it is up).

    >>> s = SlotLoads(2, up=True)
    >>> s.take(prefetch=True), s.take(prefetch=True), s.count(prefetch=True)  # the idle first, from worker 0
    (0, 1, 0)
    >>> s.add(0, 1); s.add(1, 1); s.count(prefetch=False), s.count(prefetch=True)
    (0, 2)
    >>> s.take(prefetch=True)  # with prefetch a busy worker takes a second trial, to queue
    1
    """

    def __init__(self, n: int, *, up: bool) -> None:
        self.load = [0 if up else 2] * n  # (2: listed nowhere)
        self.free: list[dict[int, None]] = [dict.fromkeys(range(n)[::-1]) if up else {}, {}]  # by load 0 / 1

    def count(self, prefetch: bool) -> int:
        """Trials the workers take now: one per idle worker, and one per worker with one trial where ``prefetch``."""
        return len(self.free[0]) + (len(self.free[1]) if prefetch else 0)

    def has_room(self, prefetch: bool) -> bool:
        return bool(self.free[0] or (prefetch and self.free[1]))

    def take(self, prefetch: bool) -> int:
        """A worker to send a trial to (an idle one first), unlisted until :meth:`add` (the trial went to it) or
        :meth:`put_back` (none did) lists it again."""
        if self.free[0]:
            return self.free[0].popitem()[0]
        if prefetch and self.free[1]:
            return self.free[1].popitem()[0]
        raise RuntimeError("no free slot: submit only when free_slots() > 0")

    def set_load(self, worker: int, load: int) -> None:
        old, self.load[worker] = self.load[worker], load
        if old < 2:
            self.free[old].pop(worker, None)
        if load < 2:
            self.free[load][worker] = None

    def add(self, worker: int, delta: int) -> None:
        """The worker holds ``delta`` more trials (-1: one of them ended)."""
        self.set_load(worker, self.load[worker] + delta)

    def put_back(self, worker: int) -> None:
        """The worker :meth:`take` gave got no trial after all: listed again, with the load it had.

        >>> s = SlotLoads(1, up=True); w = s.take(prefetch=False); s.count(prefetch=False)
        0
        >>> s.put_back(w); s.count(prefetch=False)
        1
        """
        self.set_load(worker, self.load[worker])

    def list_free(self, worker: int) -> None:
        """The worker is up and holds nothing."""
        self.load[worker] = 2
        self.set_load(worker, 0)

    def unlist(self, worker: int) -> None:
        """The worker is gone (its replacement is listed by :meth:`list_free` once it is up)."""
        self.set_load(worker, 2)

    def unlist_all(self) -> None:
        for worker in range(len(self.load)):
            self.unlist(worker)


__all__ = ["SlotLoads"]

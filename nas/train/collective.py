"""Telling a data-parallel gang's failed collective (a timeout, a vanished peer: FailureKind.COLLECTIVE) from the
training's own error, for the gang's runner (:mod:`nas.train.gang`) and the built-in trainer's first step
(:mod:`nas.train.fit`), which the gang's module imports.

>>> collective_error(RuntimeError("Connection closed by peer [127.0.0.1]:4242")), collective_error(ValueError("x"))
(True, False)
"""

from __future__ import annotations

#: what gloo and NCCL say when a peer is gone or a collective timed out (they raise a bare RuntimeError)
_COLLECTIVE_SIGNS = ("gloo", "NCCL", "Timed out waiting", "Connection closed by peer", "pair closure",
                     "Connection reset")


def collective_error(e: BaseException) -> bool:
    """Whether ``e`` is a collective's failure (a timeout, a vanished peer) rather than the training's own."""
    import torch.distributed as dist

    return isinstance(e, dist.DistError) or (isinstance(e, RuntimeError)
                                             and any(s in str(e) for s in _COLLECTIVE_SIGNS))


__all__ = ["collective_error"]

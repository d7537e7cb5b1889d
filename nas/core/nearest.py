"""The "did you mean" of every refusal of a name: the known names nearest to a misspelt one, by difflib's ratio
(the standard library's; what argparse uses for its own suggestions since Python 3.12).

>>> did_you_mean("evoluton", ["evolution", "random", "rl"])
" (did you mean 'evolution'?)"
>>> did_you_mean(["populaton"], ["population", "sample_size"])
" (did you mean 'population'?)"
>>> did_you_mean(["populaton", "sample_sise", "seed"], ["population", "sample_size"])
" (did you mean 'population' for 'populaton', 'sample_size' for 'sample_sise'?)"
>>> did_you_mean("xyz", ["evolution"])
''
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like ``name`` (difflib ratio >= 0.6), or None."""
    hits = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return hits[0] if hits else None


def did_you_mean(names: str | Iterable[str], known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for one unknown name, `` (did you mean 'x' for 'y', ...?)`` for several (those that
    have a near name), or '' where none is near (or what was given is no name: a number, a list in a config)."""
    if not isinstance(names, str | list | tuple | set | frozenset) or not all(
            isinstance(n, str) for n in ([names] if isinstance(names, str) else names)):
        return ""
    known, names = list(known), [names] if isinstance(names, str) else list(names)
    if len(names) == 1:
        hit = nearest(names[0], known)
        return f" (did you mean {hit!r}?)" if hit else ""
    pairs = [(n, nearest(n, known)) for n in names]
    said = ", ".join(f"{hit!r} for {n!r}" for n, hit in pairs if hit)
    return f" (did you mean {said}?)" if said else ""


__all__ = ["did_you_mean", "nearest"]

"""The search's progress display (kept at this path for imports; it lives in :mod:`nas.monitor.progress`)."""

from __future__ import annotations

from nas.monitor.progress import FittingBar, SearchProgress, postfix

ProgressBar = SearchProgress  # the name nas.cli and earlier code use

__all__ = ["FittingBar", "ProgressBar", "SearchProgress", "postfix"]

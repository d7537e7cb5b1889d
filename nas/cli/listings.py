"""``nas spaces``, ``nas strategies``, ``nas schedulers``: what is registered, with options and defaults."""

from __future__ import annotations

import argparse


def _lister(kind: str, **how: bool) -> object:
    def handler(args: argparse.Namespace) -> int:
        from nas.core import registry
        from nas.monitor.listing import listing

        print(listing(getattr(registry, kind).items(), **how))
        return 0

    return handler


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("spaces", help="list the search spaces, their options and defaults").set_defaults(
        handler=_lister("spaces", size=True))
    sub.add_parser("strategies", help="list the search strategies, their options (-o) and defaults").set_defaults(
        handler=_lister("strategies", module_first=True))
    sub.add_parser("schedulers", help="list the early-stopping schedulers, their options and defaults").set_defaults(
        handler=_lister("schedulers", module_first=True))

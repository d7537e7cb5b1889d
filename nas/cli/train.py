"""``nas recipes``: the training recipes (named sets of training settings) and where each comes from."""

from __future__ import annotations

import argparse

from nas.train.recipes import RECIPES


def cmd_recipes(args: argparse.Namespace) -> int:
    for name, recipe in RECIPES.items():
        print(f"{name:10s} {recipe['about']}")
        if args.verbose:
            print(f"{'':10s} source: {recipe['source']}")
            print(f"{'':10s} " + ", ".join(f"{k}={v}" for k, v in recipe["settings"].items()))
    if not args.verbose:
        print("\nuse one with: nas search --recipe NAME (options given explicitly win); details: nas recipes -v")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recipes", help="list the training recipes (nas search --recipe NAME)",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("-v", "--verbose", action="store_true", help="also print each recipe's settings and source")
    p.set_defaults(handler=cmd_recipes)

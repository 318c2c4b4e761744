"""`python -m tests.model.explore [--depth N]`: explore, print the figures, exit 1 on a violation."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tests.model.explore.search import DEFAULT_DEPTH, explore


def main() -> int:
    logging.disable(logging.CRITICAL)  # the consumer logs every failure it handles
    parser = argparse.ArgumentParser(prog="python -m tests.model.explore")
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help=f"actions per path (default {DEFAULT_DEPTH})")
    args = parser.parse_args()
    result = explore(depth=args.depth)
    print(json.dumps(result.summary(), indent=1))
    print(
        f"explored {result.states} states and {result.transitions} transitions to depth {result.depth}"
        f" in {result.seconds:.1f} s"
    )
    if result.violation is not None:
        print(f"\nVIOLATION\n{result.violation}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Which of `tests/model/mutants.py`'s mutants the explorer catches: each applied as that
harness applies it, then a full exploration. Run: `python -m tests.model.explore.mutants [--depth N]`."""

from __future__ import annotations

import argparse
import json
import logging
import time

from tests.model.explore.search import explore


def run(depth: int | None = None, names: list[str] | None = None) -> list[dict]:
    from tests.model.mutants import MUTANTS

    results = []
    for name, mutant in MUTANTS.items():
        if names and name.split()[0] not in names:
            continue
        started = time.monotonic()
        with mutant():
            found = explore(depth=depth)
        row = {
            "mutant": name,
            "caught": found.violation is not None,
            "states_until_found": found.states,
            "depth": found.depth,
            "seconds": round(time.monotonic() - started, 1),
        }
        if found.violation is not None:
            row["world"] = found.violation.world
            row["invariant"] = found.violation.invariant
            row["trace_steps"] = len(found.violation.steps) - 1
        results.append(row)
        print(json.dumps(row), flush=True)
    return results


def main() -> int:
    logging.disable(logging.CRITICAL)
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("mutants", nargs="*", help="mutant numbers (e.g. 3b 4); default: all")
    args = parser.parse_args()
    run(args.depth, args.mutants)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The deep profile's figures, summed over the workers that ran it (`make verify`).

    python -m tests.model.figures model-figures.json [--min-steps 20000]

Each pytest-xdist worker writes `<path>.<worker>` (tests/model/test_delivery_model.py); this
sums their counts into `<path>` (seconds: the longest worker's), removes the parts, prints
the total, and exits 1 when the profile ran fewer steps than `--min-steps`: a deep profile
that stopped short is not the proof `make verify` claims.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def merge(parts: list[dict]) -> dict:
    """Counts summed; `seconds` the longest part's (the workers ran at the same time)."""
    total: Counter = Counter()
    seconds = 0.0
    profiles = {part.get("profile") for part in parts}
    for part in parts:
        for name, value in part.items():
            if name == "seconds":
                seconds = max(seconds, float(value))
            elif isinstance(value, int) and not isinstance(value, bool):
                total[name] += value
    return {"profile": "+".join(sorted(p for p in profiles if p)), "workers": len(parts), **total, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--min-steps", type=int, default=0)
    args = parser.parse_args(argv)
    files = sorted(args.path.parent.glob(f"{args.path.name}.gw*"))
    if files:
        figures = merge([json.loads(f.read_text()) for f in files])
        args.path.write_text(json.dumps(figures, indent=1) + "\n")
        for f in files:
            f.unlink()
    elif args.path.exists():  # one process ran it: its own file is the total
        figures = json.loads(args.path.read_text())
    else:
        parser.error(f"{args.path}: no figures (did the model check run?)")
    print(f"model check: {json.dumps(figures)}")
    steps = int(figures.get("steps", 0))
    if steps < args.min_steps:
        print(f"the profile ran {steps:,} steps, fewer than the {args.min_steps:,} asked")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

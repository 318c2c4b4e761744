"""A recipient file in S3 read in parts: byte ranges, one job part each (s3_publish.py,
s3_forecast.py), each read pinned to the ETag (and version) a HEAD saw.

A line belongs to the range where it starts: a part reads from the byte before its range (to
find where its first line starts) to the end of the last line that starts in it. A CSV range
after the first is read with the file's header before its own lines. Line numbers are the
file's: a part knows its lines' places within it, and the job adds the lines of the parts
before it once every part is recorded (`file_problems`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from sendonce.domain.campaigns.ports import ObjectLines, StoredObject

# The job item holds each part's outcome (under DynamoDB's 400 KB): a larger object is cut
# into larger ranges.
MOST_PARTS = 500
PROBLEMS_KEPT = 100  # reported rows kept in the job (the first, by line)
PROBLEM_CHARS = 200
HEADER_BYTES = 64 * 1024


def cut(size: int, range_bytes: int) -> tuple[int, int]:
    """(range bytes, parts) for an object of `size` bytes: at most MOST_PARTS parts."""
    range_bytes = max(range_bytes, math.ceil(size / MOST_PARTS))
    return range_bytes, math.ceil(size / range_bytes)


def pinned_params(bucket: str, key: str, fmt: str, pinned: StoredObject, range_bytes: int) -> dict[str, Any]:
    """What a job in parts records of its object: where, how it is read, the HEAD's pin."""
    range_bytes, parts = cut(pinned.size, range_bytes)
    return {
        "bucket": bucket,
        "key": key,
        "name": f"s3://{bucket}/{key}",
        "format": fmt,
        "size": pinned.size,
        "etag": pinned.etag,
        "version_id": pinned.version_id,
        "range_bytes": range_bytes,
        "parts": parts,
    }


def kept_per_part(params: dict[str, Any]) -> int:
    """Each part keeps its share of the first reported rows (the job keeps them all)."""
    return max(1, math.ceil(PROBLEMS_KEPT / int(params["parts"])))


def header_shift(params: dict[str, Any], part: int) -> int:
    """Lines a part reads before its own: a CSV range after the first reads the header."""
    return 1 if params["format"] == "csv" and part > 0 else 0


def range_lines(objects: ObjectLines, params: dict[str, Any], part: int, count: list[int]) -> Iterator[str]:
    """The lines of part `part` of the object `params` pin (`pinned_params`), a CSV range
    after the first preceded by the file's header; `count[0]` counts the lines read."""
    pinned = StoredObject(size=params["size"], etag=params["etag"], version_id=params["version_id"])
    start = part * params["range_bytes"]
    end = min(params["size"], start + params["range_bytes"])
    if header_shift(params, part):
        # The header: the first line that is not blank, among the lines starting in the
        # object's first HEADER_BYTES (read to their end, so the read is closed).
        head = list(objects.lines_in_range(params["bucket"], params["key"], 0, HEADER_BYTES, pinned=pinned))
        header = next((line for line in head if line.strip()), "")
        count[0] += 1
        yield header
    for line in objects.lines_in_range(params["bucket"], params["key"], start, end, pinned=pinned):
        count[0] += 1
        yield line


def file_problems(parts: list[dict[str, Any]]) -> list[str]:
    """The first PROBLEMS_KEPT reported rows of all parts, as 'LINE: reason', by the file's
    line (each part's outcome: `lines` read and `problems` as [line in the part, reason])."""
    found: list[tuple[int, str]] = []
    before = 0
    for outcome in parts:
        found += [(before + line, text) for line, text in outcome["problems"]]
        before += outcome["lines"]
    return [f"{line}: {text}" for line, text in sorted(found)[:PROBLEMS_KEPT]]

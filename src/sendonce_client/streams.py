"""Publishing in parallel streams: up to N chunks of recipients in flight at once, bounded.

Shared by `Client.publish` (one API request per chunk) and the CLI's `campaign publish
--streams` (one `CampaignService.publish` per chunk). Publishing is idempotent per chunk
(batch ids are content-addressed and the ledger sends each delivery once), so chunks may
land in any order; what a failure has to say is exactly which chunks landed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

DEFAULT_STREAMS = 4
MAX_STREAMS = 32

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Chunk(Generic[T]):
    """One request's recipients: the `index`-th chunk (from 0), holding the caller's
    positions `first`..`last` (counted from 0; repeats skipped before chunking fall between)."""

    index: int
    first: int
    last: int
    items: T


@dataclass(frozen=True)
class ChunkFailure:
    """A chunk that did not land, and why."""

    index: int
    first: int
    last: int
    error: BaseException


def check_streams(streams: int) -> int:
    if not 1 <= streams <= MAX_STREAMS:
        raise ValueError(f"streams must be 1..{MAX_STREAMS}, not {streams}")
    return streams


def run_in_streams(
    chunks: Iterable[Chunk[T]],
    send: Callable[[Chunk[T]], R],
    *,
    streams: int,
    landed: Callable[[Chunk[T], R], None],
) -> list[ChunkFailure]:
    """Call `send` on every chunk, up to `streams` at once; `landed` (called in the caller's
    thread) gets each chunk that succeeded with its answer. Returns the chunks that failed,
    in chunk order.

    Bounded: the next chunk is drawn from `chunks` only when a stream is free, so at most
    `streams` chunks are in flight plus the one being built. The first chunk goes alone (it
    moves a draft campaign to sending, and a refused campaign fails on one request). After
    a failure no new chunk starts; the ones in flight finish and are reported either way.
    An error raised by `chunks` itself is raised once the chunks in flight have finished.
    """
    check_streams(streams)
    source: Iterator[Chunk[T]] = iter(chunks)
    failures: list[ChunkFailure] = []
    source_error: BaseException | None = None

    def finished(chunk: Chunk[T], future: Future[R]) -> None:
        error = future.exception()
        if error is None:
            landed(chunk, future.result())
        else:
            failures.append(ChunkFailure(chunk.index, chunk.first, chunk.last, error))

    with ThreadPoolExecutor(max_workers=streams, thread_name_prefix="sendonce-publish") as pool:
        in_flight: dict[Future[R], Chunk[T]] = {}
        limit = 1  # the first chunk alone
        exhausted = False
        while True:
            while not failures and source_error is None and not exhausted and len(in_flight) < limit:
                try:
                    chunk = next(source)
                except StopIteration:
                    exhausted = True
                    break
                except Exception as exc:  # noqa: BLE001 - raised below, once the chunks in flight are done
                    source_error = exc
                    break
                in_flight[pool.submit(send, chunk)] = chunk
            if not in_flight:
                break
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: in_flight[f].index):
                finished(in_flight.pop(future), future)
            limit = streams
    if source_error is not None and not failures:
        raise source_error
    return sorted(failures, key=lambda f: f.index)


def merged_ranges(chunks: Iterable[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(index, first, last) of chunks -> the caller's (first, last) position ranges, chunks
    of consecutive indexes merged: [(0, 0, 999), (1, 1000, 1999), (3, 3000, 3999)] ->
    [(0, 1999), (3000, 3999)]."""
    merged: list[tuple[int, int]] = []
    previous = -2
    for index, first, last in sorted(chunks):
        if merged and index == previous + 1:
            merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
        previous = index
    return merged

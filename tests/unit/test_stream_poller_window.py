"""The local stream poller's batching window (Lambda's MaximumBatchingWindowInSeconds, as the
running poller approximates it): after a round that filled no batch it waits the window, so
records gather into the batches the deployed mapping would hand the aggregator; after a full
batch it polls again at once; without a window it never waits while records keep coming."""

from __future__ import annotations

import pytest

from sendonce_local.stream_poller import StreamPoller

ARN = "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/1"


class FakeStreams:
    """One shard whose GetRecords hands out the next `sizes` records, one size per round."""

    meta = type("Meta", (), {"region_name": "us-east-1"})()

    def __init__(self, sizes: list[int]) -> None:
        self._sizes = list(sizes)
        self._next = 0

    def describe_stream(self, **_):
        return {"StreamDescription": {"Shards": [{"ShardId": "shard-0"}]}}

    def get_shard_iterator(self, **_):
        return {"ShardIterator": "it"}

    def get_records(self, *, ShardIterator, Limit):  # noqa: N803 - boto3's names
        size = min(self._sizes.pop(0), Limit) if self._sizes else 0
        records = [self._record(self._next + i) for i in range(size)]
        self._next += size
        return {"Records": records}

    @staticmethod
    def _record(n: int) -> dict:
        return {
            "eventID": str(n),
            "eventName": "INSERT",
            "dynamodb": {"SequenceNumber": str(n + 1), "Keys": {}, "ApproximateCreationDateTime": 0},
        }


class RecordedWaits:
    """Stands in for the poller's stop event: records each wait, stops after `rounds`."""

    def __init__(self, rounds: int) -> None:
        self.waits: list[float] = []
        self._rounds = rounds

    def is_set(self) -> bool:
        return len(self.waits) >= self._rounds

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self.is_set()


def _run(sizes: list[int], window: float, rounds: int) -> tuple[list[float], list[int]]:
    batches: list[int] = []
    poller = StreamPoller(
        streams_client=FakeStreams(sizes),
        stream_arns=[ARN],
        handler=lambda event, context: batches.append(len(event["Records"])),
        batch_size=4,
        interval_s=0.1,
        batching_window_s=window,
    )
    waits = RecordedWaits(rounds)
    poller._stopping = waits  # type: ignore[assignment] - the loop's only clock
    poller._run()
    return waits.waits, batches


def test_after_a_batch_that_is_not_full_the_poller_waits_the_window():
    waits, batches = _run([2, 0], window=2.0, rounds=2)
    assert batches == [2]
    assert waits == [2.0, 0.1]  # the window after the partial batch, then the idle interval


def test_after_a_full_batch_it_polls_again_at_once_and_waits_only_after_the_partial_one():
    waits, batches = _run([4, 4, 1, 0], window=2.0, rounds=2)
    assert batches == [4, 4, 1]
    assert waits == [2.0, 0.1]


def test_without_a_window_it_never_waits_while_records_keep_coming():
    waits, batches = _run([2, 1, 0], window=0.0, rounds=1)
    assert batches == [2, 1]
    assert waits == [0.1]


class SteppingClock:
    """`time.monotonic` for the poller: each reading is `step` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _drainer(sizes: list[int], handler, monkeypatch) -> StreamPoller:
    import sendonce_local.stream_poller as module

    monkeypatch.setattr(module.time, "monotonic", SteppingClock(10.0))
    return StreamPoller(streams_client=FakeStreams(sizes), stream_arns=[ARN], handler=handler, batch_size=4)


def test_drain_outlasts_its_wait_while_records_keep_being_applied(monkeypatch):
    # 20 rounds of records, 10 s a round on this clock: 200 s, past a 30 s wait. A busy
    # machine applying a big campaign is slow, not stuck (the demo hit a fixed 60 s).
    batches: list[int] = []
    poller = _drainer([1] * 20, lambda event, context: batches.append(len(event["Records"])), monkeypatch)
    counters = poller.drain(max_seconds=30)
    assert counters.records == 20 and batches == [1] * 20


def test_drain_gives_up_when_nothing_is_applied_for_its_wait(monkeypatch):
    def failing(event, context):
        raise RuntimeError("the aggregator keeps failing")

    poller = _drainer([1] * 50, failing, monkeypatch)
    with pytest.raises(TimeoutError, match="applied no record for 30"):
        poller.drain(max_seconds=30)
    assert poller.counters.records == 0 and poller.counters.errors >= 3


class CountingStreams(FakeStreams):
    def __init__(self, sizes: list[int]) -> None:
        super().__init__(sizes)
        self.described = 0

    def describe_stream(self, **kwargs):
        self.described += 1
        return super().describe_stream(**kwargs)


def test_the_shard_list_is_read_once_every_shard_list_rounds_not_every_round():
    # Idle, a round is one GetShardIterator and one GetRecords a shard; DescribeStream every
    # round was a third of the requests (60 a second for the aggregator's two streams).
    from sendonce_local.stream_poller import SHARD_LIST_ROUNDS

    streams = CountingStreams([1] * (2 * SHARD_LIST_ROUNDS + 1))
    batches: list[int] = []
    poller = StreamPoller(streams_client=streams, stream_arns=[ARN], handler=lambda e, c: batches.append(1))
    for _ in range(2 * SHARD_LIST_ROUNDS + 1):
        poller.poll_once()
    assert len(batches) == 2 * SHARD_LIST_ROUNDS + 1  # every round still reads the shard
    assert streams.described == 3


def test_an_idle_round_waits_a_quarter_second_as_lambda_polls_four_times_a_second():
    poller = StreamPoller(streams_client=FakeStreams([]), stream_arns=[ARN], handler=lambda e, c: None)
    waits = RecordedWaits(1)
    poller._stopping = waits  # type: ignore[assignment] - the loop's only clock
    poller._run()
    assert waits.waits == [0.25]

"""run_in_streams: N chunks in flight at once, bounded, and a failure that says which landed."""

from __future__ import annotations

import threading

import pytest

from sendonce_client.streams import Chunk, merged_ranges, run_in_streams


def chunks(n: int, drawn: list[int] | None = None, size: int = 10):
    for index in range(n):
        if drawn is not None:
            drawn.append(index)
        yield Chunk(index, index * size, index * size + size - 1, list(range(index * size, index * size + size)))


def test_n_chunks_are_in_flight_at_once_after_the_first_and_never_more():
    # Given a send that holds every chunk after the first until 4 are in it at once
    barrier = threading.Barrier(4, timeout=30)
    lock = threading.Lock()
    state = {"in_flight": 0, "most": 0, "calls": 0}

    def send(chunk):
        with lock:
            state["calls"] += 1
            state["in_flight"] += 1
            state["most"] = max(state["most"], state["in_flight"])
        try:
            if chunk.index:
                barrier.wait()  # broken (an error) if fewer than 4 ever wait together
            return len(chunk.items)
        finally:
            with lock:
                state["in_flight"] -= 1

    landed: list[int] = []
    # When 9 chunks go through 4 streams
    failures = run_in_streams(chunks(9), send, streams=4, landed=lambda c, r: landed.append(c.index))

    # Then each landed once, 4 at a time after the first
    assert failures == [] and sorted(landed) == list(range(9)) and landed[0] == 0
    assert state["most"] == 4 and not barrier.broken


def test_at_most_streams_plus_one_chunks_are_held():
    drawn: list[int] = []
    finished: list[int] = []
    held: list[int] = []
    lock = threading.Lock()

    def send(chunk):
        with lock:
            # drawn from the source and not yet finished (the one being built included)
            held.append(len(drawn) - len(finished))
        return None

    def done(chunk, _):
        finished.append(chunk.index)

    run_in_streams(chunks(50, drawn), send, streams=3, landed=done)
    # At most 3 chunks drawn and not finished (+ the one the source is building: N + 1 in all)
    assert len(finished) == 50 and max(held) <= 3


def test_after_a_failure_no_chunk_starts_and_the_ones_in_flight_are_reported():
    started: list[int] = []
    release = threading.Event()

    def send(chunk):
        started.append(chunk.index)
        if chunk.index == 2:
            raise RuntimeError("refused")
        if chunk.index in (1, 3, 4):
            release.wait(10)  # still in flight when chunk 2 fails
        return chunk.index

    landed: list[tuple[int, int, int]] = []

    def done(chunk, _):
        landed.append((chunk.index, chunk.first, chunk.last))
        release.set()

    release_on_failure = threading.Timer(0.5, release.set)
    release_on_failure.start()
    failures = run_in_streams(chunks(20), send, streams=4, landed=done)
    release_on_failure.cancel()

    assert [(f.index, f.first, f.last, str(f.error)) for f in failures] == [(2, 20, 29, "refused")]
    assert sorted(started) == [0, 1, 2, 3, 4]  # the first alone, then 4: none after the failure
    assert merged_ranges(landed) == [(0, 19), (30, 49)]


def test_an_error_from_the_recipients_is_raised_once_the_chunks_in_flight_finish():
    landed: list[int] = []

    def source():
        yield from chunks(3)
        raise TypeError("a recipient must be a mapping")

    with pytest.raises(TypeError, match="mapping"):
        run_in_streams(source(), lambda c: None, streams=2, landed=lambda c, r: landed.append(c.index))
    assert sorted(landed) == [0, 1, 2]


def test_one_stream_is_one_chunk_at_a_time_in_order():
    order: list[int] = []
    run_in_streams(chunks(5), lambda c: order.append(c.index), streams=1, landed=lambda c, r: None)
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("streams", [0, 33])
def test_streams_out_of_range_are_refused(streams):
    with pytest.raises(ValueError, match="streams must be 1..32"):
        run_in_streams(chunks(1), lambda c: None, streams=streams, landed=lambda c, r: None)


# --- the CLI's direct path ---------------------------------------------------------------


def test_a_chunk_refused_among_streams_names_the_recipients_that_landed():
    from sendonce.domain.campaigns.service import PublishReport
    from sendonce.domain.errors import InvalidCampaignError
    from sendonce.domain.models import Recipient
    from sendonce_ops.publish_streams import publish_in_streams

    class Service:
        """Refuses the chunk holding r12 (the third of 4 chunks of 5)."""

        def publish(self, campaign_id, recipients, *, batch_size):
            if any(r.recipient_id == "r12" for r in recipients):
                raise InvalidCampaignError("r12 is too large")
            return PublishReport(campaign_id=campaign_id, accepted=len(recipients), batches_new=1, messages_sent=1)

    people = [Recipient(recipient_id=f"r{i}", email=f"u{i}@example.com") for i in range(20)]
    with pytest.raises(InvalidCampaignError) as refused:
        publish_in_streams(Service(), "c1", people, streams=3, chunk_recipients=5)  # type: ignore[arg-type]
    # The first chunk alone, then the other three at once: the third refused, the rest landed
    assert (
        str(refused.value) == "r12 is too large (published in 3 streams: recipients 0-9, 15-19 landed, 10-14 did not)"
    )

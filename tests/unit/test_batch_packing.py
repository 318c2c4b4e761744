"""Packing recipients into batches by count and bytes (domain/campaigns/batches.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendonce.domain.campaigns.batches import OversizedRecipientError, batch_id_for, body_bytes, pack
from sendonce.domain.models import SCHEMA_VERSION, BatchMessage, Recipient

sizes = st.lists(st.integers(min_value=0, max_value=60_000), min_size=1, max_size=60)
texts = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FFF), max_size=40)


def people(lengths: list[int], text: str = "") -> list[Recipient]:
    return [
        Recipient(recipient_id=f"r{i}", email=f"u{i}@example.com", variables={"v": text + "x" * n})
        for i, n in enumerate(lengths)
    ]


@settings(max_examples=60, deadline=None)
@given(lengths=sizes, text=texts, batch_size=st.integers(min_value=1, max_value=100))
def test_every_batch_fits_keeps_order_and_its_size_is_counted_exactly(lengths, text, batch_size):
    recipients = people(lengths, text)
    chunks = list(pack("c1", recipients, batch_size=batch_size, max_body_bytes=200_000))
    assert [r for chunk in chunks for r in chunk] == recipients
    for chunk in chunks:
        body = BatchMessage(
            schema_version=SCHEMA_VERSION, campaign_id="c1", batch_id=batch_id_for("c1", chunk), recipients=chunk
        ).to_body()
        assert len(body.encode()) == body_bytes("c1", chunk) <= 200_000
        assert len(chunk) <= batch_size
    # A batch is cut only when the next recipient would not fit (or the count is reached)
    for chunk, following in zip(chunks, chunks[1:], strict=False):
        assert len(chunk) == batch_size or body_bytes("c1", [*chunk, following[0]]) > 200_000


def test_a_recipient_that_cannot_fit_alone_is_refused_after_the_batch_before_it():
    recipients = people([10, 10, 300_000, 10])
    produced = []
    with pytest.raises(OversizedRecipientError, match="'r2'"):
        for chunk in pack("c1", recipients, max_body_bytes=262_144):
            produced.append(chunk)
    assert produced == [recipients[:2]]

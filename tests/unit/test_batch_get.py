"""batch_get_items: 100 keys a request, unprocessed keys asked again, never a partial answer."""

from __future__ import annotations

import pytest

from sendonce.adapters.dynamodb.batch_get import batch_get_items
from sendonce.domain.errors import CampaignBusyError


class Client:
    """Answers each request's first `hold` keys as unprocessed, `hold` falling by one each time."""

    def __init__(self, hold: int):
        self.hold = hold
        self.requests: list[int] = []

    def batch_get_item(self, RequestItems):  # noqa: N803 (boto3's name)
        ((table, request),) = RequestItems.items()
        keys = request["Keys"]
        self.requests.append(len(keys))
        held, answered = keys[: self.hold], keys[self.hold :]
        self.hold = max(0, self.hold - 1)
        return {
            "Responses": {table: [dict(k) for k in answered]},
            "UnprocessedKeys": {table: {"Keys": held, "ConsistentRead": True}} if held else {},
        }


def keys(n):
    return [{"pk": {"S": f"k{i}"}} for i in range(n)]


def test_every_key_is_read_a_hundred_a_request_and_the_unprocessed_asked_again():
    client = Client(hold=2)
    items = batch_get_items(client, "t", keys(250), sleep=lambda s: None)
    assert sorted(i["pk"]["S"] for i in items) == sorted(k["pk"]["S"] for k in keys(250))
    assert client.requests == [100, 2, 1, 100, 50]


def test_keys_still_unprocessed_after_the_attempts_raise_rather_than_answer_in_part():
    client = Client(hold=10**6)
    with pytest.raises(CampaignBusyError, match="3 key"):
        batch_get_items(client, "t", keys(3), attempts=3, sleep=lambda s: None)
    assert client.requests == [3, 3, 3]

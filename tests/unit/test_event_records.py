"""SES's record for the audit (adapters/dynamodb/event_records.py) reads each delivery's
`sent` entries in both shapes the ledger holds: the short names written since 2026-12-07
and the long ones before, one message id once, at its event's own time."""

from __future__ import annotations

from sendonce.adapters.dynamodb.event_records import LedgerEventRecords

T = 1_796_622_328_189  # 2026-12-07T05:45:28.189Z


class OneShardLedger:
    """A DynamoDB client whose one Query (paginated) answers `items`."""

    def __init__(self, items):
        self.items = items

    def get_paginator(self, operation):
        assert operation == "query"
        return self

    def paginate(self, **request):
        return [{"Items": self.items}]


def test_sent_entries_in_either_shape_are_listed_once_each_at_their_own_time():
    old = {
        "recipient_id": {"S": "r1"},
        "email_fp": {"S": "fp1"},
        "provider_events": {
            "L": [
                {
                    "M": {
                        "at": {"S": "2026-12-07T05:45:29.000+00:00"},
                        "event": {"S": "sent"},
                        "message_id": {"S": "m-old"},
                        "occurred_at": {"S": "2026-12-07T05:45:28.189Z"},
                    }
                }
            ]
        },
    }
    new = {
        "recipient_id": {"S": "r2"},
        "email_fp": {"S": "fp2"},
        "provider_events": {
            "L": [
                {"M": {"k": {"S": "sent"}, "t": {"N": str(T)}, "m": {"S": "m-new"}}},
                {"M": {"k": {"S": "sent"}, "t": {"N": str(T + 5)}, "m": {"S": "m-new"}}},  # the same id again
                {"M": {"k": {"S": "sent"}, "t": {"N": str(T + 9)}, "m": {"S": "m-second"}}},  # a second send
                {"M": {"k": {"S": "delivered"}, "t": {"N": str(T + 50)}, "d": {"S": "example.com"}}},
            ]
        },
    }
    records = LedgerEventRecords(
        client=OneShardLedger([old, new]), ledger_table="t", shards_of=lambda _: 1, provider="ses"
    )

    listed = list(records.listed("c1", since_ms=0))

    assert [(e.recipient_id, e.email_id, e.created_at_ms, e.to_fingerprints) for e in listed] == [
        ("r1", "m-old", T, ("fp1",)),
        ("r2", "m-new", T, ("fp2",)),
        ("r2", "m-second", T + 9, ("fp2",)),
    ]

"""The campaign report's series that no ledger stream record carries: duplicates prevented
(a refused claim writes nothing to the ledger) and the lifecycle's marks, written by the
real consumer and campaign store against moto, read back by the report's one Query."""

from __future__ import annotations

import boto3
import pytest

from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.domain.campaigns.lifecycle import AUTOMATIC
from sendonce.domain.campaigns.report import ReportService
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce_local.request_counter import RequestCounter
from sendonce_ops.report_page import write
from tests.integration.test_campaign_report import open_report, page_figures

pytestmark = pytest.mark.integration

WRITES = ("UpdateItem", "PutItem", "TransactWriteItems", "BatchWriteItem", "DeleteItem")


class WriteLog:
    """Every DynamoDB write request a session makes (RequestCounter), and the table and
    partition key of each item it writes."""

    def __init__(self, session: boto3.session.Session, ledger_table: str):
        self.counter = RequestCounter(session)
        self.ledger_table = ledger_table
        self.items: list[tuple[str, str, str]] = []  # (operation, table, pk)
        session.events.register("provide-client-params.dynamodb", self._record)

    def _record(self, params, model, **_):
        if model.name not in WRITES:
            return
        items = [entry[next(iter(entry))] for entry in params.get("TransactItems", [])] or [params]
        for item in items:
            key = item.get("Key") or item.get("Item") or {}
            self.items.append((model.name, item["TableName"], key.get("pk", {}).get("S", "")))

    def requests(self) -> int:
        return sum(self.counter.calls[f"dynamodb.{name}"] for name in WRITES)

    def ledger_writes(self) -> int:
        return sum(1 for _, table, _ in self.items if table == self.ledger_table)

    def campaign_writes(self) -> list[tuple[str, str]]:
        """Writes to the campaigns table but the shared rate limiter's (its slots are taken
        in chunks that depend on timing, and are the same with or without the report)."""
        return [
            (op, pk) for op, table, pk in self.items if table != self.ledger_table and not pk.startswith("limiter#")
        ]

    def reset(self) -> None:
        self.counter.reset()
        self.items.clear()


def two_batches(system) -> list[str]:
    """A sending campaign of two batches of five; their SQS bodies, taken off the queue."""
    system.campaign()
    system.operator.publish("c1", system.recipients(10), batch_size=5)
    sqs = boto3.client("sqs")
    bodies: list[str] = []
    while len(bodies) < 2:
        messages = sqs.receive_message(QueueUrl=system.resources.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        bodies += [m["Body"] for m in messages.get("Messages", [])]
    return sorted(bodies)


def reports(system) -> ReportService:
    return ReportService(
        campaigns=system.operator,
        aggregates=DynamoDBReportAggregates(
            client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table
        ),
        clock=lambda: 0,
    )


def test_a_redelivered_message_shows_as_duplicates_prevented_for_one_write_and_a_fresh_one_for_none(system):
    # Given the real consumer on a session whose DynamoDB writes are counted
    body, _ = two_batches(system)
    session = boto3.session.Session()
    log = WriteLog(session, system.resources.ledger_table)
    runtime = build_consumer_runtime(system.settings, build_consumer_parts(system.settings, Clients(session)))

    # When a fresh message is delivered
    fresh = runtime.service.process(body, receive_count=1, remaining_ms=lambda: 60_000)

    # Then its five recipients are sent, and the report costs it nothing: a claim and a
    # mark_sent per recipient, and the batch's settlement on the campaign item, as before
    assert fresh.sent == 5 and fresh.duplicates_prevented == 0
    assert log.ledger_writes() == 2 * 5
    assert log.campaign_writes() == [("UpdateItem", "campaign#c1")]
    fresh_requests = log.requests()

    # When the same message is delivered again (a redelivery, or a redrive from the DLQ)
    log.reset()
    again = runtime.service.process(body, receive_count=2, remaining_ms=lambda: 60_000)

    # Then every claim is refused, nothing is sent, and the five refusals cost one write
    assert again.sent == 0 and again.duplicates_prevented == 5
    assert log.ledger_writes() == 5  # the refused claims
    writes = sorted(log.campaign_writes())  # the prevented count on one consumer writer's key
    assert writes[0] == ("UpdateItem", "campaign#c1") and len(writes) == 2
    assert writes[1][0] == "UpdateItem" and writes[1][1].startswith("report#c1#consumer-")
    assert sorted(system.deliveries().values()) == [1] * 5  # one email each, the message's five
    print(f"DynamoDB write requests: fresh message {fresh_requests}, redelivered {log.requests()}")

    # ... and the report shows them, in the minute they were refused
    report = reports(system).report("c1")
    assert report.figures()["duplicates_prevented"] == 5
    assert [sum(b.counts.values()) for b in report.duplicates_prevented] == [5]


def test_each_lifecycle_move_leaves_one_mark_with_who_and_why(system):
    # Given a campaign published, paused, resumed, published to again, and cancelled
    system.campaign()
    operator = system.operator
    operator.publish("c1", system.recipients(2))
    operator.pause("c1", reason="checking the template")
    operator.resume("c1")
    operator.publish("c1", system.recipients(2, start=2))  # a publish that keeps the state
    operator.cancel("c1")

    # When its report is read
    marks = reports(system).report("c1").marks

    # Then each move is marked once, in order, with who took it and why; a publish into a
    # campaign already sending is no move and leaves none
    assert [m.event for m in marks] == ["publish", "pause", "resume", "cancel"]
    assert marks[1].reason == "checking the template"
    assert all(m.by and m.by != AUTOMATIC for m in marks)
    assert [m.at_ms for m in marks] == sorted(m.at_ms for m in marks) and marks[0].at_ms > 0


@pytest.mark.browser
def test_the_page_shows_the_duplicates_prevented_and_lists_the_moves(system, page, tmp_path):
    # Given a campaign whose first message was delivered twice, then paused by an operator
    body, _ = two_batches(system)
    runtime = build_consumer_runtime(system.settings, build_consumer_parts(system.settings, clients()))
    for receive in (1, 2):
        runtime.service.process(body, receive_count=receive, remaining_ms=lambda: 60_000)
    system.operator.pause("c1", reason="checking the template")

    # When its report is written and opened
    path = write(reports(system).report("c1"), tmp_path / "c1.html")
    open_report(page, path)

    # Then the page prints the five refusals, marks both moves on the timeline and lists them
    assert page_figures(page)["duplicates_prevented"] == "5"
    assert page.page.locator("#duplicates g.point").count() == 1
    assert {"publish", "pause"} <= set(page.page.locator("#timeline .annotation-text").all_text_contents())
    rows = page.page.locator("#marks tbody tr").all_text_contents()
    assert len(rows) == 2 and "checking the template" in rows[1]
    assert page.console_errors == [] and page.requests == [path.as_uri()]


@pytest.mark.browser
def test_the_screenshot_command_draws_the_page_into_a_small_png(chromium, tmp_path):
    from PIL import Image

    from sendonce_ops.report_screenshot import screenshot
    from tests.integration.test_campaign_report import million_recipient_report

    page_path = write(million_recipient_report(), tmp_path / "big.html")

    size = screenshot(page_path, tmp_path / "big.png", browser=chromium)

    image = Image.open(tmp_path / "big.png")
    assert image.width == 1200 and image.height > 1200  # the whole page, not the viewport
    assert len(image.getcolors(maxcolors=256) or []) > 20  # charts drawn, not a blank page
    assert size < 300_000  # small enough to commit (docs/img/report.png)

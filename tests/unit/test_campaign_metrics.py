"""The handlers publish contract.CAMPAIGN_METRICS a second time per campaign (the dashboard's
per-campaign view reads them): one EMF document per campaign with the `campaign` dimension,
while the service-wide series stay as they were."""

from __future__ import annotations

import json

import pytest

from sendonce import contract
from sendonce.domain.deliverability.provider_events import EventReport
from sendonce.domain.sending.batch_run import BatchReport
from sendonce.handlers import consumer, events
from sendonce.handlers.observability import metrics


@pytest.fixture(autouse=True)
def no_leftover_metrics():
    metrics.clear_metrics()
    yield
    metrics.clear_metrics()


def documents(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def per_campaign(out: str) -> list[dict]:
    found = []
    for document in documents(out):
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        if directive["Dimensions"] == [[contract.METRIC_CAMPAIGN_DIMENSION, contract.METRIC_SERVICE_DIMENSION]]:
            names = {m["Name"] for m in directive["Metrics"]}
            found.append({"campaign": document["campaign"], **{n: document[n] for n in names}})
    return found


def test_a_batch_publishes_its_sends_duplicates_and_unknowns_under_its_campaign(capsys):
    consumer._emit(BatchReport(campaign_id="spring", sent=7, duplicates_prevented=3, unknown=1, failed=2))

    # Failures are not per campaign; zeros are not published
    assert per_campaign(capsys.readouterr().out) == [
        {"campaign": "spring", "EmailsSent": [7.0], "DuplicateSendsPrevented": [3.0], "UnknownOutcomes": [1.0]}
    ]
    flushed = metrics.serialize_metric_set()  # the service-wide set is still the handler's to flush
    assert flushed["EmailsSent"] == [7.0] and "campaign" not in flushed


def test_a_complaint_is_published_under_its_campaign_and_an_unmatched_event_under_none(capsys):
    events._emit(EventReport(status="applied", counted="complaints", campaign_id="spring"))
    events._emit(EventReport(status="no_delivery"))

    assert per_campaign(capsys.readouterr().out) == [{"campaign": "spring", "Complaints": [1.0]}]


def test_a_batch_with_nothing_per_campaign_publishes_no_document(capsys):
    consumer._emit(BatchReport(campaign_id="spring", skipped_state=None, returning=4))

    assert per_campaign(capsys.readouterr().out) == []

"""Issue 33's acceptance test: an A/B campaign of 2,000 recipients through the local stack on
moto. The operator creates it from a spec and publishes it with the CLI; the real consumer
sends the test share (batch mode), each test recipient its own variant, and leaves the rest
pending; the local Resend server opens variant B's subject five times as often as A's, and
its Svix-signed webhooks reach the real events function, which counts them per variant; the
test's end fires through EventBridge Scheduler (moto stores the schedule, the local firer
fires it by a clock the test moves) and the scheduled-start function picks B by the figures;
its job republishes the rest, who are sent B. Then every recipient has exactly one email at
the provider, the status shows the variants and the decision, and the audit against
Resend's own listing agrees.

The fixture's 2-second visibility timeout has batches delivered again while they are being
sent on a loaded machine (900 sends refused by the ledger in one run, none with 60 s): the
"never twice" is tested under redelivery too. 110-125 s beside three other CPU-bound runs on
the 2-core machine, moto's DynamoDB most of it: `make test-slow`, not `make test`. `pytest -s`
prints the figures.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.variants import AbTest, assign
from sendonce_local.resources import SchedulingResources, create_scheduling_resources
from sendonce_local.scheduler_poller import LocalClock, SchedulePoller
from sendonce_local.stream_poller import StreamPoller
from tests.integration.operator_helpers import as_json, local_schedule_firer, people, sendonce, write_csv
from tests.integration.test_counters import counted, streams  # noqa: F401 - counted: a fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECIPIENTS = 2_000
AFTER_S = 60  # `after: 1m`, the shortest the spec allows (variants.AFTER_LEAST_S)
TEST = AbTest(variants=("A", "B"), share=0.2, pick_by="opens", after_s=AFTER_S)
SUBJECTS = {"A": "[A] Spring is here, {{ name }}", "B": "[B] {{ name }}, 20% off this week"}
# The local Resend server's readers, by the variant its subject names (a fifth of openers click).
OPENS = {"A": 0.1, "B": 0.5}
# A file name: the test also writes the campaign's report page there (`sendonce campaign
# report`), with the rest's opens, for the README's screenshot (docs/img/report-ab.png).
REPORT_ENV = "SENDONCE_AB_REPORT"
# Hang guards, not timings: a 100-recipient batch took over 20 s on a loaded machine
# (test_batch_mode.py), and the webhooks of 400 emails over 30 s beside other runs.
FUNCTION_TIMEOUT_S = 90
CONSUME_GUARD_S = 240
WEBHOOKS_GUARD_S = 240


@pytest.fixture
def system(counted):  # noqa: F811 - `counted` is the conftest's `system` with the tables' streams on
    """The local sendonce with the streams on, so that the counters' aggregator counts each
    variant's sends from the ledger's stream as deployed. The conftest's `deliverability`
    (the events function behind a local HTTP API, sent the local Resend server's webhooks)
    builds on this one."""
    return counted


@dataclass
class AbRun:
    """The stack around campaign `ab`: the operator's CLI (the schedule group named, campaigns
    counted as where the aggregator runs), the consumers, the aggregator, the schedule firer."""

    system: Any
    scheduling: SchedulingResources
    clock: LocalClock
    firer: SchedulePoller
    aggregator: StreamPoller

    def cli(self, *args: str):
        return sendonce(self.system, *args, env={**self.scheduling.env(), "SENDONCE_COUNTERS": "1"})

    def status(self) -> dict[str, Any]:
        return as_json(self.cli("campaign", "status", "ab", "--json"))

    def consume(self) -> None:
        """Consumers until the queue is idle, every webhook the provider queued delivered, and
        the aggregator caught up with the streams."""
        self.system.poller(timeout_s=FUNCTION_TIMEOUT_S, concurrency=2).run_until_idle(
            idle_seconds=1.5, max_seconds=CONSUME_GUARD_S
        )
        assert self.system.resend.wait_for_webhooks(WEBHOOKS_GUARD_S)
        self.aggregator.drain()


def write_spec(path: Path, system) -> Path:
    variants = "".join(f"  - {{id: {v}, subject: '{s}'}}\n" for v, s in SUBJECTS.items())
    path.write_text(
        "id: ab\n"
        "name: Spring launch A/B\n"
        f"from: News <news@{system.domain}>\n"
        "provider: resend\n"
        "delivery_mode: batch\n"
        "ledger_shards: 4\n"
        "html: '<p>Hi {{ name }}</p><p><a href=\"https://shop.example/spring\">Shop</a></p>'\n"
        "text: 'Hi {{ name }}: https://shop.example/spring'\n"
        "tracking: {opens: true, clicks: true}\n"
        f"variants:\n{variants}"
        f"test: {{share: {TEST.share}, pick_by: {TEST.pick_by}, after: {AFTER_S // 60}m}}\n"
    )
    return path


@pytest.fixture
def ab(system, deliverability, tmp_path) -> Iterator[AbRun]:
    scheduling = create_scheduling_resources()
    clock, firer = local_schedule_firer(system, scheduling)
    system.resend.set_engagement(
        [{"subject_contains": f"[{v}]", "opens": share, "clicks": share / 5} for v, share in OPENS.items()]
    )
    with streams(system) as aggregator:  # running beside the consumers, as deployed
        run = AbRun(system=system, scheduling=scheduling, clock=clock, firer=firer, aggregator=aggregator)
        created = run.cli("campaign", "create", "--spec", str(write_spec(tmp_path / "ab.yaml", system)))
        assert created.exit_code == 0, created.output + created.stderr
        yield run
    system.resend.set_engagement(None)


def variant_of_subject(subject: str) -> str:
    found = re.match(r"^\[([AB])\] ", subject)
    assert found, subject
    return found.group(1)


def sent_variants(system) -> dict[str, str]:
    """Address -> the variant its email's subject names, as the provider accepted them."""
    return {record.to[0].lower(): variant_of_subject(record.subject) for record in system.resend.accepted()}


def opened_by_variant(system) -> Counter[str]:
    """Recipients the local Resend server said opened, by the variant their email's subject names."""
    openers = {
        (json.loads(hook.body)["data"]["subject"], hook.recipient)
        for hook in system.resend.webhook_deliveries()
        if hook.type == "email.opened" and hook.state == "delivered"
    }
    return Counter(variant_of_subject(subject) for subject, _ in openers)


def test_an_ab_campaign_sends_its_test_picks_b_by_the_opens_and_sends_b_to_the_rest_once_each(ab, tmp_path):
    system = ab.system
    everyone = people(system, RECIPIENTS)
    address = {rid: email.lower() for rid, email, _ in everyone}
    in_test = {rid: v for rid, _, _ in everyone if (v := assign("ab", rid, TEST)) is not None}
    rest = [rid for rid in address if rid not in in_test]
    sizes = Counter(in_test.values())
    assert 300 < len(in_test) < 500 and min(sizes.values()) > 100  # a fifth of 2,000, in two

    # Given the campaign published to 2,000 recipients: it starts now, and its pick is scheduled
    recipients = write_csv(tmp_path / "recipients.csv", everyone)
    published = ab.cli("campaign", "publish", "ab", "--recipients", str(recipients))
    assert published.exit_code == 0, published.output + published.stderr
    [pick_schedule] = ab.firer.schedules()
    assert json.loads(pick_schedule["Target"]["Input"]).keys() >= {"campaign_id", "pick_at"}
    assert ab.firer.fire_due() == []  # not before the test's end

    # When the consumers run until the queue is idle, and the provider's webhooks arrive
    ab.consume()

    # Then the test alone was sent, each recipient its own variant; the rest wait, unsent
    assert system.deliveries() == {address[rid]: 1 for rid in in_test}
    assert sent_variants(system) == {address[rid]: v for rid, v in in_test.items()}
    assert {record.endpoint for record in system.resend.accepted()} == {"/emails/batch"}
    waiting = ab.status()
    assert (waiting["state"], waiting["sent"], waiting["pending"]) == ("sending", len(in_test), len(rest))
    assert waiting["ab_test"]["awaiting_winner"] and waiting["ab_test"]["decision"] is None
    # and each variant's unique opens are those the provider reported, B's far more often
    opened = opened_by_variant(system)
    test_figures = waiting["ab_test"]["variants"]
    assert {v: (f["sent"], f["opened"]) for v, f in test_figures.items()} == {
        v: (sizes[v], opened[v]) for v in TEST.variants
    }
    assert test_figures["B"]["open_rate"] > 2 * test_figures["A"]["open_rate"]

    # When the clock passes the test's end and the firer fires what is due
    ab.clock.advance(AFTER_S + 1)
    [firing] = ab.firer.fire_due()

    # Then the scheduled pick chose B by the rates, once, and started the job sending it to the rest
    assert firing.ok, firing.error
    result = firing.result
    reason = f"highest rate of unique opens per email sent (A {opened['A']}/{sizes['A']}, B {opened['B']}/{sizes['B']})"
    assert (result["picked"], result["variant"], result["job_id"]) == (True, "B", "ab-pick")
    assert (result["decision"]["by"], result["decision"]["reason"]) == (lifecycle.AUTOMATIC, reason)
    assert ab.firer.schedules() == []  # deleted once fired
    again = ab.firer.fire(pick_schedule)  # as the service's retry would
    assert (again.result["picked"], again.result["variant"]) == (False, "B")

    # When the consumers run again. The rest's webhooks decide nothing now: the provider sends
    # none (4,000 more, minutes of the events function on moto) unless a report page is wanted.
    report_page = os.environ.get(REPORT_ENV)
    if not report_page:
        system.resend.set_webhook(None)
    ab.consume()

    # Then every recipient received exactly one email: 0 twice, 0 missing; the test its own
    # variant, the rest B, each tagged with the variant it was sent
    deliveries = system.deliveries()
    twice = sorted(a for a, n in deliveries.items() if n > 1)
    missing = sorted(set(address.values()) - set(deliveries))
    assert (len(twice), len(missing), len(deliveries)) == (0, 0, RECIPIENTS)
    assert sent_variants(system) == {address[rid]: in_test.get(rid, "B") for rid in address}
    tags = [{t["name"]: t["value"] for t in record.tags} for record in system.resend.accepted()]
    assert {(t["recipient_id"], t["variant"]) for t in tags} == {(rid, in_test.get(rid, "B")) for rid in address}

    # And the status shows each variant's figures, the rest's, and the decision
    final = ab.status()
    assert (final["state"], final["sent"], final["pending"]) == ("completed", RECIPIENTS, 0)
    figures = final["ab_test"]
    assert (figures["decision"]["variant"], figures["decision"]["reason"]) == ("B", reason)
    assert {v: f["sent"] for v, f in figures["variants"].items()} == dict(sizes)  # the test's alone
    assert figures["rest"]["sent"] == len(rest)
    assert figures["rest"]["opened"] == opened_by_variant(system)["B"] - opened["B"]
    shown = ab.cli("campaign", "status", "ab")
    assert "B (winner)" in shown.stdout and f"winner B, picked by {lifecycle.AUTOMATIC}" in shown.stdout
    print_figures(figures)
    if report_page:
        written = ab.cli("campaign", "report", "ab", "--out", report_page)
        assert written.exit_code == 0, written.output + written.stderr

    # And the audit against Resend's own listing agrees: 2,000 sent once, none twice or missing
    audited = ab.cli("campaign", "audit", "ab", "--json")
    findings = json.loads(audited.stdout.splitlines()[-1])["findings"]
    assert (audited.exit_code, findings["clean"]) == (0, True), findings["counts"]
    assert findings["counts"]["sent_once"] == RECIPIENTS
    assert findings["duplicates"] == [] and findings["recipients"] == {}


def print_figures(figures: dict[str, Any]) -> None:
    """The variants' figures and the decision, for `pytest -s` to show."""
    print(f"\nA/B campaign of {RECIPIENTS:,} recipients, test share {TEST.share:.0%}, picked by {TEST.pick_by}")
    for name, f in [*figures["variants"].items(), ("rest", figures["rest"])]:
        rates = [f"{100 * r:.1f}%" if r is not None else "-" for r in (f["open_rate"], f["click_rate"])]
        print(
            f"  {name:>4}: sent {f['sent']:>5,}  unique opens {f['opened']:>4,} ({rates[0]})"
            f"  clicks {f['clicked']:>3,} ({rates[1]})"
        )
    decision = figures["decision"]
    print(f"  winner {decision['variant']}, by {decision['by']}: {decision['reason']}")

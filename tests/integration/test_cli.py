"""`sendonce` against moto's server: each command, its output, its exit code; bad input
leaves nothing created and nothing sent."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import CampaignState
from sendonce_ops.sqs_tools import queue_depths
from tests.integration.operator_helpers import as_json, people, sendonce, sendonce_process, spec_file, write_csv

pytestmark = pytest.mark.integration


def test_create_publish_status_and_completion(system, tmp_path):
    # Given a spec and a recipient file with template variables
    created = sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    assert (created.exit_code, created.stdout) == (0, "c1\n")
    recipients = write_csv(tmp_path / "people.csv", people(system, 25))

    # When it is published and consumed
    published = as_json(sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--json"))
    before = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    after = as_json(sendonce(system, "campaign", "status", "c1", "--json"))

    # Then every count adds up, and a campaign whose recipients all ended is completed
    assert published == {
        "campaign_id": "c1",
        "accepted": 25,
        "bad_rows": 0,
        "duplicates": 0,
        "duplicate_addresses": 0,
        "batches_new": 1,
        "batches_already_enqueued": 0,
        "messages_sent": 1,
        "batches_recorded": 0,
        "send_at": None,
    }
    assert (before["state"], before["total"], before["pending"], before["remaining"]) == ("sending", 25, 25, 25)
    counts = ("pending", "in_progress", "sent", "failed", "suppressed", "unknown", "cancelled", "dead_lettered")
    assert sum(after[k] for k in counts) == after["total"] == 25
    assert (after["state"], after["sent"], after["remaining"]) == ("completed", 25, 0)
    assert after["state_reason"] == "every recipient ended"
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(25)}
    accepted = system.resend.accepted()[0]
    assert accepted.subject.startswith("Hello User ")

    table = sendonce(system, "campaign", "status", "c1")
    assert table.exit_code == 0 and "completed" in table.stdout and "sent" in table.stdout
    shown = as_json(sendonce(system, "ledger", "show", "c1", "r3", "--json"))
    assert shown["state"] == "sent" and shown["email_fingerprint"]
    assert [h["event"] for h in shown["history"]] == ["claimed", "sent"]
    assert system.domain not in json.dumps(shown)  # a fingerprint, never the address
    text = sendonce(system, "ledger", "show", "c1", "r3")
    assert text.exit_code == 0 and "history" in text.stdout and system.domain not in text.stdout


def test_publishing_a_file_twice_sends_nobody_twice_and_reports_repeated_ids(system, tmp_path):
    system.campaign()
    recipients = write_csv(tmp_path / "people.csv", people(system, 12) + people(system, 2))  # r0, r1 repeated

    first = sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--batch-size", "5")
    again = as_json(
        sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--batch-size", "5", "--json")
    )

    assert first.exit_code == 0
    assert f"{recipients}:14: recipient_id 'r0' repeats line 2; published once" in first.stderr
    assert "accepted" in first.stdout
    assert (again["accepted"], again["duplicates"], again["batches_new"], again["messages_sent"]) == (12, 2, 0, 0)
    assert system.operator.status("c1").total == 12


def test_strict_publish_of_a_file_with_bad_rows_publishes_nothing(system, tmp_path):
    system.campaign()
    recipients = tmp_path / "people.csv"
    recipients.write_text(
        "recipient_id,email,name\n"
        f"r1,user1@{system.domain},Ann\n"
        "r2,not-an-address,Bob\n"
        f"r3,user3@{system.domain}\n"
        f"user4@{system.domain},user4@{system.domain},Dan\n"
    )

    result = sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--strict")
    only_bad = tmp_path / "bad.csv"
    only_bad.write_text("recipient_id,email\nr1,nobody\n")
    lenient_but_empty = sendonce(system, "campaign", "publish", "c1", "--recipients", str(only_bad))
    system.poller().run_until_idle(idle_seconds=0.5, max_seconds=10)

    assert result.exit_code == 2
    assert f"{recipients}:3: email: not a valid email address" in result.stderr
    assert f"{recipients}:4: expected 3 columns, found 2" in result.stderr
    assert f"{recipients}:5: recipient_id: must be 1-100 letters" in result.stderr
    assert f"rejected: {recipients}: 3 bad row(s); nothing was published" in result.stderr
    assert lenient_but_empty.exit_code == 2 and "no valid recipient in the file" in lenient_but_empty.stderr
    assert system.operator.get("c1").state is CampaignState.DRAFT
    assert queue_depths(boto3.client("sqs"), system.resources.queue_url) == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert system.deliveries() == {}


def test_without_strict_bad_rows_are_skipped_the_rest_published_and_the_exit_code_says_so(system, tmp_path):
    system.campaign()
    recipients = tmp_path / "people.jsonl"
    recipients.write_text(
        json.dumps({"recipient_id": "r1", "email": f"user1@{system.domain}", "variables": {"name": "Ann"}})
        + "\n"
        + json.dumps({"recipient_id": "r2", "email": "nobody"})
        + "\n"
        + json.dumps({"recipient_id": "r3", "email": f"user3@{system.domain}", "variables": {"name": "Cy"}})
        + "\n"
    )

    result = sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--json")
    system.poller().run_until_idle(idle_seconds=0.5, max_seconds=20)

    assert result.exit_code == 3
    assert f"{recipients}:2: email: not a valid email address" in result.stderr
    assert json.loads(result.stdout)["bad_rows"] == 1
    assert set(system.deliveries()) == {f"user1@{system.domain}", f"user3@{system.domain}"}


def test_a_malformed_spec_names_file_field_and_line_and_creates_nothing(system, tmp_path):
    spec = spec_file(tmp_path / "c.yaml", system)
    spec.write_text(
        spec.read_text().replace("provider: resend", "provider: mailgun").replace("name: Spring launch\n", "")
    )

    missing_name = sendonce(system, "campaign", "create", "--spec", str(spec))
    spec.write_text(spec.read_text() + "name: Spring\n")
    unknown_provider = sendonce(system, "campaign", "create", "--spec", str(spec))
    spec.write_text("id: c1\nname: [oops\n")
    broken_yaml = sendonce(system, "campaign", "create", "--spec", str(spec))

    assert missing_name.exit_code == 2 and f"{spec}: name: Field required" in missing_name.stderr
    assert unknown_provider.exit_code == 2
    assert f"{spec}:4: provider: 'mailgun' is not registered (known: resend, ses)" in unknown_provider.stderr
    assert broken_yaml.exit_code == 2 and f"{spec}:3: not valid YAML" in broken_yaml.stderr
    assert "nothing was created" in broken_yaml.stderr
    with pytest.raises(CampaignNotFoundError):
        system.operator.get("c1")


def test_a_share_of_the_rate_is_checked_against_the_consumers_rate_created_and_shown(system, tmp_path):
    # Given specs asking for a share of the rate; this system's consumer paces Resend at 1,000
    # requests/s (SENDONCE_RESEND_REQUESTS_PER_SECOND), far above Resend's default of 5
    spec = spec_file(tmp_path / "c.yaml", system)
    spec.write_text(spec.read_text() + "weight: 3\npriority: high\nmax_rate: 50\n")
    too_fast = spec_file(tmp_path / "fast.yaml", system, "c2")
    too_fast.write_text(too_fast.read_text() + "max_rate: 5000\n")
    bad_weight = spec_file(tmp_path / "heavy.yaml", system, "c3")
    bad_weight.write_text(bad_weight.read_text() + "weight: 0\n")

    created = as_json(sendonce(system, "campaign", "create", "--spec", str(spec), "--json"))
    refused = sendonce(system, "campaign", "create", "--spec", str(too_fast))
    heavy = sendonce(system, "campaign", "create", "--spec", str(bad_weight))
    status = sendonce(system, "campaign", "status", "c1")
    status_json = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    listed = sendonce(system, "campaign", "list")

    shares = {"weight": 3, "priority": "high", "max_rate": 50.0}
    assert {k: created[k] for k in shares} == {k: status_json[k] for k in shares} == shares
    assert refused.exit_code == 2 and "nothing was created" in refused.stderr
    assert f"{too_fast}:8: max_rate: 5000 is above provider 'resend''s rate of 1000 requests/s" in refused.stderr
    assert heavy.exit_code == 2 and f"{bad_weight}:8: weight: must be a whole number from 1 to 100" in heavy.stderr
    assert "delivery mode single, weight 3, priority high, max_rate 50 requests/s" in status.stdout
    assert [line for line in listed.stdout.splitlines() if " c1 " in line and " high " in line]
    assert [c.campaign_id for c in system.operator.list_campaigns()] == ["c1"]


def test_unknown_campaign_and_illegal_transitions_exit_with_their_codes(system, tmp_path):
    system.campaign()
    recipients = write_csv(tmp_path / "people.csv", people(system, 3))

    unknown = [sendonce(system, "campaign", verb, "nope") for verb in ("status", "pause", "resume", "cancel")]
    unknown_publish = sendonce(system, "campaign", "publish", "nope", "--recipients", str(recipients))
    pause_draft = sendonce(system, "campaign", "pause", "c1")
    system.operator.publish("c1", system.recipients(2))
    paused = sendonce(system, "campaign", "pause", "c1", "--reason", "checking copy")
    cancelled = sendonce(system, "campaign", "cancel", "c1", "--reason", "wrong list", "--json")
    resume_cancelled = sendonce(system, "campaign", "resume", "c1")
    publish_cancelled = sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients))
    duplicate_create = sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    no_record = sendonce(system, "ledger", "show", "c1", "r1")

    for result in [*unknown, unknown_publish]:
        assert result.exit_code == 2 and "campaign 'nope' does not exist" in result.stderr
    assert pause_draft.exit_code == 4 and "is draft; cannot move to paused" in pause_draft.stderr
    assert paused.exit_code == 0 and paused.stdout == "paused c1: now paused (checking copy), by ann\n"
    assert as_json(cancelled)["state_reason"] == "wrong list" and as_json(cancelled)["state_changed_by"] == "ann"
    assert resume_cancelled.exit_code == 4 and "is cancelled" in resume_cancelled.stderr
    assert publish_cancelled.exit_code == 4 and "nothing can be published" in publish_cancelled.stderr
    system.poller().run_until_idle(idle_seconds=0.5, max_seconds=10)
    assert duplicate_create.exit_code == 4 and "already exists" in duplicate_create.stderr
    assert no_record.exit_code == 2 and "no ledger record" in no_record.stderr
    assert system.deliveries() == {}


def test_a_missing_stack_is_a_clear_error(system):
    unset = {
        name: None
        for name in (
            "SENDONCE_QUEUE_URL",
            "SENDONCE_DEAD_LETTER_QUEUE_URL",
            "SENDONCE_LEDGER_TABLE",
            "SENDONCE_CAMPAIGNS_TABLE",
        )
    }

    result = sendonce(system, "--stack", "NoSuchStack", "campaign", "status", "c1", env=unset)

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: stack 'NoSuchStack' not found in region us-east-1 "
        "(deploy it with `cdk deploy` or set SENDONCE_* variables)"
    )


def test_endpoints_are_read_from_the_stack_outputs(system, tmp_path):
    resources = system.resources
    outputs = {
        "QueueUrl": resources.queue_url,
        "DeadLetterQueueUrl": resources.dead_letter_queue_url,
        "LedgerTableName": resources.ledger_table,
        "CampaignsTableName": resources.campaigns_table,
    }
    template = {
        "Resources": {"Nothing": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {k: {"Value": v} for k, v in outputs.items()},
    }
    stack = f"Sendonce{system.domain.split('.')[0]}"
    boto3.client("cloudformation").create_stack(StackName=stack, TemplateBody=json.dumps(template))
    unset = {
        name: None
        for name in (
            "SENDONCE_QUEUE_URL",
            "SENDONCE_DEAD_LETTER_QUEUE_URL",
            "SENDONCE_LEDGER_TABLE",
            "SENDONCE_CAMPAIGNS_TABLE",
        )
    }
    system.campaign()

    result = sendonce(system, "--stack", stack, "campaign", "status", "c1", "--json", env=unset)

    assert as_json(result)["state"] == "draft"


def test_the_installed_command_runs_as_a_process(system, tmp_path):
    spec = spec_file(tmp_path / "c.yaml", system)
    recipients = write_csv(tmp_path / "people.csv", people(system, 5))

    created = sendonce_process(system, "campaign", "create", "--spec", str(spec))
    published = sendonce_process(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--json")
    system.operator.cancel("c1")
    illegal = sendonce_process(system, "campaign", "pause", "c1")

    assert (created.returncode, created.stdout) == (0, "c1\n")
    assert published.returncode == 0 and json.loads(published.stdout)["accepted"] == 5
    assert illegal.returncode == 4 and "is cancelled; cannot move to paused" in illegal.stderr


def test_usage_errors_exit_2_and_help_documents_the_exit_codes(system):
    usage = sendonce(system, "campaign", "publish", "c1")
    helped = sendonce(system, "--help")

    assert usage.exit_code == 2 and "Missing option '--recipients'" in usage.stderr
    assert "Exit codes:" in helped.stdout and "4  not allowed in the campaign's state" in helped.stdout


# --- publish's progress bar (bytes of the recipient file read) ---------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _file_with_multibyte_rows(path, system, n: int):
    # Names outside ASCII: the file's bytes outnumber its characters, and the bar counts bytes.
    return write_csv(path, [(f"r{i}", f"user{i}@{system.domain}", f"Zoë Ångström {i}") for i in range(n)])


def test_publish_is_quiet_on_stderr_when_it_is_not_a_terminal_or_with_json(system, tmp_path):
    system.campaign()
    system.campaign("c2")
    recipients = _file_with_multibyte_rows(tmp_path / "people.csv", system, 150)

    piped = sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients))
    as_json_on_a_terminal = sendonce(
        system, "campaign", "publish", "c2", "--recipients", str(recipients), "--json", env={"TTY_COMPATIBLE": "1"}
    )

    assert piped.exit_code == 0 and piped.stderr == ""
    assert "published to c1" in piped.stdout
    assert as_json_on_a_terminal.exit_code == 0 and as_json_on_a_terminal.stderr == ""
    assert json.loads(as_json_on_a_terminal.stdout)["accepted"] == 150


def test_publish_on_a_terminal_shows_bytes_read_with_rate_and_eta_for_each_pass(system, tmp_path):
    from rich.filesize import decimal

    system.campaign()
    recipients = _file_with_multibyte_rows(tmp_path / "people.csv", system, 250)
    size = recipients.stat().st_size
    assert size > len(recipients.read_text(encoding="utf-8"))

    # TTY_COMPATIBLE=1 is rich's own switch for "this stream is a terminal"
    shown = sendonce(
        system,
        "campaign",
        "publish",
        "c1",
        "--recipients",
        str(recipients),
        "--strict",
        env={"TTY_COMPATIBLE": "1", "COLUMNS": "150"},
    )

    assert shown.exit_code == 0, shown.stderr
    frames = [ANSI.sub("", frame).strip() for frame in shown.stderr.split("\r")]
    amount, unit = decimal(size).split()
    final = [f for f in frames if f.startswith("publishing people.csv: 250 recipients")]
    assert final, frames
    assert f"{amount}/{amount} {unit}" in final[-1]  # every byte read, measured in bytes
    assert re.search(r" [\d.]+ [kMG]?B/s ", final[-1])  # the rate
    assert re.search(r"\d+:\d\d:\d\d$", final[-1])  # the ETA
    assert any(f.startswith("checking people.csv") for f in frames)  # --strict reads the file twice
    assert system.domain not in shown.stderr


# --- shell completion (click's own) ---------------------------------------------------------


def test_the_installed_command_produces_its_bash_completion_script(system):
    script = sendonce_process(system, env={"_SENDONCE_COMPLETE": "bash_source"})

    assert script.returncode == 0, script.stderr
    assert "_sendonce_completion()" in script.stdout
    assert "complete -o nosort -F _sendonce_completion sendonce" in script.stdout


def test_completion_offers_the_subcommands_and_the_states(system):
    words = sendonce_process(
        system, env={"_SENDONCE_COMPLETE": "bash_complete", "COMP_WORDS": "sendonce campaign li", "COMP_CWORD": "2"}
    )
    states = sendonce_process(
        system,
        env={
            "_SENDONCE_COMPLETE": "bash_complete",
            "COMP_WORDS": "sendonce campaign list --state p",
            "COMP_CWORD": "4",
        },
    )

    assert words.returncode == 0 and words.stdout.split() == ["plain,list"]
    assert states.returncode == 0 and states.stdout.split() == ["plain,paused"]


def test_publish_in_parallel_streams_records_each_recipient_once_and_a_rerun_adds_nothing(system, tmp_path):
    from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore

    system.campaign()
    # Given 2,500 recipients (3 chunks of 1,000), r0..r9 repeated at the end
    recipients = write_csv(tmp_path / "people.csv", people(system, 2_500) + people(system, 10))

    # When the file is published in 3 streams, then again in 2
    first = as_json(
        sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--streams", "3", "--json")
    )
    again = as_json(
        sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--streams", "2", "--json")
    )

    # Then each recipient is in exactly one batch record, and the re-run enqueued nothing
    assert (first["accepted"], first["duplicates"], first["batches_new"], first["messages_sent"]) == (2_500, 10, 25, 25)
    assert (again["accepted"], again["batches_new"], again["batches_already_enqueued"]) == (2_500, 0, 25)
    store = DynamoDBCampaignStore(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    ids = [r.recipient_id for batch, _ in store.batches("c1") for r in batch.recipients]
    assert len(ids) == len(set(ids)) == 2_500


def test_publish_streams_out_of_range_is_a_usage_error(system, tmp_path):
    system.campaign()
    recipients = write_csv(tmp_path / "people.csv", people(system, 1))
    refused = sendonce(system, "campaign", "publish", "c1", "--recipients", str(recipients), "--streams", "0")
    assert refused.exit_code == 2 and "--streams" in refused.stderr


def test_the_status_of_an_ab_campaign_gives_its_variants_figures_and_the_winner_or_that_it_is_awaited(system):
    from sendonce.adapters.dynamodb.report_aggregates import increment_updates
    from sendonce.domain.campaigns.report_data import LedgerChange, increments_of
    from sendonce.domain.campaigns.variants import AbTest, Variant
    from sendonce.domain.models import Campaign, Content, Tracking

    # Given an A/B campaign whose report's aggregates hold its test's sends and opens
    system.operator.create(
        Campaign(
            campaign_id="ab",
            name="A/B",
            provider="resend",
            ledger_shards=4,
            sender=f"news@{system.domain}",
            content=Content(
                subject="Hi",
                text="Hello",
                variants=(Variant(id="A", subject="A: hi"), Variant(id="B", subject="B: hi")),
            ),
            tracking=Tracking(opens=True),
            ab_test=AbTest(variants=("A", "B"), share=0.25, pick_by="opens", after_s="4h"),
        )
    )
    system.operator.publish("ab", system.recipients(4))  # sending (nobody consumes here)
    changes = [LedgerChange("claimed", "sent", 1_000, variant=v) for v in ["A"] * 8 + ["B"] * 8]
    client, table = boto3.client("dynamodb"), system.resources.campaigns_table
    client.transact_write_items(TransactItems=increment_updates(table, "ab", "w3", increments_of(changes)))
    client.update_item(
        TableName=table,
        Key={"pk": {"S": "report#ab#w3"}, "sk": {"S": "minute#0000000060000#w3"}},
        UpdateExpression="ADD #a :a, #b :b",
        ExpressionAttributeNames={"#a": "v:A:opened", "#b": "v:B:opened"},
        ExpressionAttributeValues={":a": {"N": "2"}, ":b": {"N": "6"}},
    )

    # When the operator reads its status, before and after picking B
    before = as_json(sendonce(system, "campaign", "status", "ab", "--json"))["ab_test"]
    awaiting = sendonce(system, "campaign", "status", "ab")
    assert sendonce(system, "campaign", "pick", "ab", "B").exit_code == 0
    after = sendonce(system, "campaign", "status", "ab")

    # Then it shows each variant's figures and rates, and the winner once picked
    assert before["variants"]["B"] == {"sent": 8, "opened": 6, "clicked": 0, "open_rate": 0.75, "click_rate": 0.0}
    assert before["rest"]["sent"] == 0 and before["awaiting_winner"] and before["decision"] is None
    assert "75.0%" in awaiting.stdout and "awaiting the winner" in awaiting.stdout
    assert "sendonce campaign pick ab [VARIANT]" in awaiting.stdout
    assert "B (winner)" in after.stdout and "winner B, picked by" in after.stdout
    assert "awaiting" not in after.stdout and "the rest" in after.stdout
    # A campaign without a test shows none
    system.campaign()
    assert as_json(sendonce(system, "campaign", "status", "c1", "--json"))["ab_test"] is None

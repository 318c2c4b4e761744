"""Recipient files and campaign specs: every bad row or field is named, nothing is guessed."""

from __future__ import annotations

import pytest

from sendonce.domain.campaigns.recipients_file import (
    RecipientFileError,
    RecipientReader,
    RejectedFileError,
    RowTally,
    describe_row,
    format_for,
    publish_file,
)
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.models import Campaign, CampaignState, Content
from sendonce_ops.specs import SpecError, load_spec, locate
from tests.fakes import FakeCampaignStore, FakeLedger, FakeQueue


def rows(text: str, fmt: str = "csv"):
    return list(RecipientReader(text.splitlines(keepends=True), fmt, name="people.csv"))


def test_csv_extra_columns_become_template_variables():
    [row] = rows("recipient_id,email,name,plan\nr1, ann@example.com ,Ann,pro\n")

    assert row.line == 2
    assert row.recipient.recipient_id == "r1"
    assert row.recipient.email == "ann@example.com"
    assert row.recipient.variables == {"name": "Ann", "plan": "pro"}


def test_each_bad_csv_row_is_reported_with_its_line_and_reason():
    text = (
        "recipient_id,email,name\n"
        "r1,ann@example.com,Ann\n"
        "r2,not-an-address,Bob\n"
        "ann@example.com,ann@example.com,Ann\n"
        "r4,dan@example.com\n"
        "\n"
        'r5,"eve@example.com","Eve\nthe second"\n'
        "r6,fay@example.com,Fay\n"
    )

    result = rows(text)

    problems = {row.line: row.problem for row in result if row.problem}
    assert problems == {
        3: "email: not a valid email address",
        4: "recipient_id: must be 1-100 letters, digits, '_' or '-', starting with a letter or digit "
        "(an opaque id, never an email address)",
        5: "expected 3 columns, found 2",
    }
    good = {row.line: row.recipient.recipient_id for row in result if row.recipient}
    assert good == {2: "r1", 7: "r5", 9: "r6"}  # a quoted field may span lines; the row starts at 7


def test_a_repeated_recipient_id_is_published_once_and_names_its_first_line():
    tally = RowTally()

    published = list(
        tally.recipients(rows("recipient_id,email\nr1,a@example.com\nr2,b@example.com\nr1,a@example.com\n"))
    )

    assert [r.recipient_id for r in published] == ["r1", "r2"]
    assert tally.duplicates == 1 and tally.bad == 0
    assert describe_row(tally.kept[0]) == "recipient_id 'r1' repeats line 2; published once"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("id,address\nr1,a@example.com\n", "people.csv:1: header must name the columns recipient_id and email"),
        ("recipient_id,email,email\n", "column(s) named twice in the header: email"),
    ],
)
def test_a_file_without_a_usable_header_fails_before_any_row(text, message):
    with pytest.raises(RecipientFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RecipientReader(text.splitlines(keepends=True), "csv", name="people.csv")


def test_a_byte_order_mark_before_the_header_is_ignored():
    [row] = rows("\ufeffrecipient_id,email\nr1,a@example.com\n")
    assert row.recipient.recipient_id == "r1"


def test_jsonl_rows_are_validated_one_by_one():
    text = (
        '{"recipient_id": "r1", "email": "a@example.com", "variables": {"name": "Ann"}}\n'
        "{not json\n"
        '["a list"]\n'
        '{"recipient_id": "r4", "email": "d@example.com", "nickname": "D"}\n'
        '{"recipient_id": "r5", "email": "e@example.com", "variables": {"tags": ["x"]}}\n'
        "\n"
        '{"recipient_id": "r7", "email": "g@example.com"}\n'
    )

    result = rows(text, "jsonl")

    problems = {row.line: row.problem for row in result if row.problem}
    assert set(problems) == {2, 3, 4, 5}
    assert problems[2].startswith("not valid JSON")
    assert problems[4] == "nickname: unexpected field"
    assert problems[5].startswith("variables.tags")
    assert [row.line for row in result if row.recipient] == [1, 7]


def test_the_format_comes_from_the_extension_unless_given():
    assert format_for("people.CSV") == "csv"
    assert format_for("people.ndjson") == "jsonl"
    assert format_for("people.txt", "jsonl") == "jsonl"
    with pytest.raises(RecipientFileError, match="say csv or jsonl"):
        format_for("people.txt")


def test_messages_never_quote_the_address_that_was_refused():
    [row] = rows("recipient_id,email\nr1,secret-person@@example.com\n")
    assert "secret-person" not in row.problem


# --- campaign specs ------------------------------------------------------------------

SPEC = """\
id: spring-2026
name: Spring launch
subject: "Hello {{ name }}"
from: News <news@example.com>
reply_to: help@example.com
provider: ses
html_file: templates/spring.html
text: "Hi {{ name }}"
"""


def test_a_spec_reads_templates_relative_to_itself(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "spring.html").write_text("<p>Hi {{ name }}</p>")
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(SPEC)

    campaign = load_spec(spec_path).to_campaign()

    assert campaign.campaign_id == "spring-2026"
    assert campaign.sender == "News <news@example.com>"
    assert campaign.content.html == "<p>Hi {{ name }}</p>"
    assert campaign.content.text == "Hi {{ name }}"


def test_a_bad_field_is_named_with_its_file_and_line(tmp_path):
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(
        SPEC.replace("from: News <news@example.com>", "from: newsroom").replace(
            "html_file: templates/spring.html\n", "subjcet: typo\n"
        )
    )

    with pytest.raises(SpecError) as raised:
        load_spec(spec_path)

    assert sorted(raised.value.problems) == sorted(
        [
            f"{spec_path}:4: from: not a valid sender address (use a@example.com or Name <a@example.com>)",
            f"{spec_path}:7: subjcet: unexpected field",
        ]
    )


def test_a_yaml_syntax_error_gives_its_line(tmp_path):
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text("id: c1\nname: [unclosed\nsubject: x\n")

    with pytest.raises(SpecError, match=r"campaign\.yaml:\d: not valid YAML"):
        load_spec(spec_path)


def test_a_json_spec_is_accepted_and_its_errors_located(tmp_path):
    spec_path = tmp_path / "campaign.json"
    spec_path.write_text(
        '{\n  "id": "c1",\n  "name": "",\n  "subject": "s",\n  "from": "a@example.com",\n'
        '  "text": "t",\n  "provider": "resend"\n}\n'
    )

    with pytest.raises(SpecError) as raised:
        load_spec(spec_path)

    assert raised.value.problems == [f"{spec_path}:3: name: String should have at least 1 character"]


def test_a_missing_template_file_and_a_missing_body_are_reported(tmp_path):
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(SPEC)
    with pytest.raises(SpecError, match="html_file: .*spring.html: no such file"):
        load_spec(spec_path)

    spec_path.write_text("id: c1\nname: n\nsubject: s\nfrom: a@example.com\nprovider: ses\n")
    with pytest.raises(SpecError, match="html or text .* is required"):
        load_spec(spec_path)


def test_service_errors_are_located_at_their_field(tmp_path):
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(SPEC)

    assert (
        locate(spec_path, "provider: 'mailgun' is not registered")
        == f"{spec_path}:6: provider: 'mailgun' is not registered"
    )


WEIGHT_RULE = "weight: must be a whole number from 1 to 100 (the campaign's share against others of its priority)"
MAX_RATE_RULE = "max_rate: must be a number from 0.001 to 100,000 (provider requests per second)"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("weight: 0", WEIGHT_RULE),
        ("weight: 101", WEIGHT_RULE),
        ("weight: 1.5", WEIGHT_RULE),
        ("weight: '2'", WEIGHT_RULE),
        ("priority: urgent", "priority: must be normal or high"),
        ("max_rate: 0", MAX_RATE_RULE),
        ("max_rate: -1", MAX_RATE_RULE),
        ("max_rate: 0.0001", MAX_RATE_RULE),
        ("max_rate: 1e6", MAX_RATE_RULE),
        ("max_rate: .inf", MAX_RATE_RULE),
        ("max_rate: fast", MAX_RATE_RULE),
    ],
)
def test_a_bad_share_of_the_rate_is_named_with_its_file_and_line(tmp_path, line, problem):
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(SPEC.replace("html_file: templates/spring.html\n", f"{line}\n"))

    with pytest.raises(SpecError) as raised:
        load_spec(spec_path)

    assert raised.value.problems == [f"{spec_path}:7: {problem}"]


def test_weight_priority_and_max_rate_reach_the_campaign_and_default_to_an_equal_uncapped_share(tmp_path):
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(SPEC.replace("html_file: templates/spring.html\n", ""))
    shared = tmp_path / "shared.yaml"
    shared.write_text(SPEC.replace("html_file: templates/spring.html\n", "weight: 3\npriority: high\nmax_rate: 2.5\n"))

    plain, weighted = load_spec(spec_path).to_campaign(), load_spec(shared).to_campaign()

    assert (plain.weight, plain.priority, plain.max_rate) == (1, "normal", None)
    assert (weighted.weight, weighted.priority, weighted.max_rate) == (3, "high", 2.5)


def test_a_campaign_stored_before_shares_reads_as_weight_1_normal_and_uncapped():
    stored = {"campaign_id": "old", "name": "old", "provider": "resend", "sender": "a@example.com", "state": "sending"}

    old = Campaign.model_validate(stored)

    assert (old.weight, old.priority, old.max_rate) == (1, "normal", None)


def test_the_api_body_uses_the_same_model_with_from_as_the_sender():
    spec = CampaignSpec.model_validate(
        {"id": "c1", "name": "n", "subject": "s", "from": "a@example.com", "text": "t", "provider": "resend"}
    )
    assert spec.to_campaign().sender == "a@example.com"


# --- publishing a file -----------------------------------------------------------------


def file_service():
    queue = FakeQueue()
    service = CampaignService(campaigns=FakeCampaignStore(), ledger=FakeLedger(), queue=queue, provider_names=["ses"])
    service.create(
        Campaign(
            campaign_id="c1", name="n", provider="ses", sender="a@example.com", content=Content(subject="s", text="t")
        )
    )
    return service, queue


MIXED = "recipient_id,email\nr1,a@example.com\nr2,nobody\nr3,c@example.com\nr1,a@example.com\n"


def opener(text: str):
    return lambda: RecipientReader(text.splitlines(keepends=True), "csv", name="people.csv")


def test_strict_publish_of_a_file_with_a_bad_row_publishes_nothing():
    service, queue = file_service()
    skipped = []

    with pytest.raises(RejectedFileError, match="people.csv: 1 bad row"):
        publish_file(service, "c1", opener(MIXED), name="people.csv", strict=True, on_report=skipped.append)

    assert queue.published == [] and service.get("c1").state is CampaignState.DRAFT
    assert [row.line for row in skipped] == [3, 5]  # the bad row and the repeat, each reported once


def test_lenient_publish_sends_the_good_rows_once_and_counts_the_rest():
    service, queue = file_service()

    report, tally = publish_file(service, "c1", opener(MIXED), name="people.csv", strict=False)

    assert (report.accepted, tally.bad, tally.duplicates) == (2, 1, 1)
    assert len(queue.published) == 1


def test_a_file_with_no_good_row_leaves_the_campaign_a_draft():
    service, queue = file_service()

    with pytest.raises(RecipientFileError, match="no valid recipient"):
        publish_file(service, "c1", opener("recipient_id,email\nr1,nobody\n"), name="people.csv", strict=False)

    assert queue.published == [] and service.get("c1").state is CampaignState.DRAFT

"""The edges of operator input: sizes (sendonce.domain.limits), header injection, hostile recipient
files, and the same address under two recipient ids. Each test names what it refuses."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import describe_validation_error, strict_json_loads
from sendonce.domain.campaigns.recipients_file import (
    InlineRecipient,
    RecipientFileError,
    RecipientReader,
    RowTally,
    describe_row,
    inline_rows,
    publish_file,
)
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.models import BatchMessage, Campaign, Content
from tests.fakes import FakeCampaignStore, FakeLedger, FakeQueue

SPEC = {
    "id": "c1",
    "name": "Spring",
    "subject": "Hi {{ name }}",
    "from": "News <news@example.com>",
    "html": "<p>Hi</p>",
    "provider": "resend",
}


def problems(**overrides) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as raised:
        CampaignSpec.model_validate({**SPEC, **overrides})
    return describe_validation_error(raised.value)


def rows(text: str, fmt: str = "csv", name: str = "people.csv"):
    return list(RecipientReader(text.splitlines(keepends=True), fmt, name=name))


@pytest.mark.parametrize(
    "field, value",
    [
        ("from", "News\r\nBcc: x@evil.example <news@example.com>"),
        ("from", "News <news@example.com>\nBcc: x@evil.example"),
        ("from", "news@example.com\r\n"),
        ("reply_to", "Help\u2028Bcc: x@evil.example <help@example.com>"),
        ("reply_to", "help\x00@example.com"),
        ("from", "Doe, Jane <jane@example.com>"),  # unquoted comma: a second address to a parser
    ],
)
def test_a_header_bound_address_with_a_line_break_or_control_character_is_refused(field, value):
    assert [f for f, _ in problems(**{field: value})] == [field]


@pytest.mark.parametrize(
    "field, value", [("subject", "Hello\r\nBcc: x@evil.example"), ("subject", "Hi\x1b[31m"), ("name", "Spring\nlaunch")]
)
def test_subject_and_name_are_one_line_without_control_characters(field, value):
    assert problems(**{field: value}) == [
        (field, "must be one line without control characters" + (" (a tab is allowed)" if field == "subject" else ""))
    ]


def test_ordinary_senders_and_a_tab_in_the_subject_are_accepted():
    for sender in (
        "news@example.com",
        "News <news@example.com>",
        '"Doe, Jane" <jane@example.com>',
        "Café Crème <hello@example.co.uk>",
    ):
        assert CampaignSpec.model_validate({**SPEC, "from": sender, "subject": "a\tb"}).sender == sender


def test_templates_are_limited_in_utf8_bytes_not_characters():
    euro = "\u20ac"  # three bytes in UTF-8
    under = euro * (limits.HTML_BYTES // 3)
    over = euro * (limits.HTML_BYTES // 3 + 1)  # fewer characters than HTML_BYTES, more bytes

    assert CampaignSpec.model_validate({**SPEC, "html": under}).html == under
    assert problems(html=over) == [
        ("html", f"html is longer than {limits.HTML_BYTES:,} bytes (UTF-8); see docs/limits.md")
    ]
    assert [f for f, _ in problems(html="x" * 500_000)] == ["html"]
    assert [f for f, _ in problems(text="x" * (limits.TEXT_BYTES + 1))] == ["text"]


def test_the_largest_campaign_the_spec_accepts_fits_one_dynamodb_item():
    spec = CampaignSpec.model_validate(
        {
            **SPEC,
            "subject": "\u20ac" * limits.SUBJECT_CHARS,
            "html": "x" * limits.HTML_BYTES,
            "text": "y" * limits.TEXT_BYTES,
        }
    )
    size = len(spec.to_campaign().model_dump_json().encode())

    assert size < limits.DYNAMODB_ITEM_BYTES - 50_000


def test_delivery_mode_is_the_operators_choice_and_defaults_to_single():
    assert CampaignSpec.model_validate(SPEC).to_campaign().delivery_mode == "single"
    assert CampaignSpec.model_validate({**SPEC, "delivery_mode": "batch"}).to_campaign().delivery_mode == "batch"
    assert [f for f, _ in problems(delivery_mode="bulk")] == ["delivery_mode"]


def test_a_batch_of_the_largest_recipients_fits_an_sqs_message_and_a_dynamodb_item():
    def biggest(i: int) -> InlineRecipient:
        base = InlineRecipient(recipient_id=f"r{i:03d}", email=f"user{i}@example.com", variables={"v": ""})
        room = limits.RECIPIENT_JSON_BYTES - len(base.model_dump_json().encode())
        return InlineRecipient(recipient_id=f"r{i:03d}", email=f"user{i}@example.com", variables={"v": "x" * room})

    people = [biggest(i) for i in range(limits.RECIPIENTS_PER_BATCH)]
    body = BatchMessage(schema_version=1, campaign_id="c" * 100, batch_id="b" * 100, recipients=people).to_body()

    assert all(len(p.model_dump_json().encode()) == limits.RECIPIENT_JSON_BYTES for p in people)
    assert len(body.encode()) <= limits.SQS_MESSAGE_BYTES
    assert len(body.encode()) < limits.DYNAMODB_ITEM_BYTES


def test_a_recipient_too_large_for_its_share_of_a_batch_is_a_bad_row_naming_its_line():
    big = "x" * limits.RECIPIENT_JSON_BYTES
    [ok, bad] = rows(f"recipient_id,email,note\nr1,a@example.com,short\nr2,b@example.com,{big}\n")

    assert ok.recipient is not None
    assert bad.line == 3 and bad.recipient is None
    assert "more than 2,500" in bad.problem and "docs/limits.md" in bad.problem


def test_too_many_variables_or_a_control_character_in_one_is_a_bad_row():
    columns = ",".join(f"v{i}" for i in range(limits.VARIABLES_PER_RECIPIENT + 1))
    wide = rows(
        f"recipient_id,email,{columns}\nr1,a@example.com,{','.join('1' * (limits.VARIABLES_PER_RECIPIENT + 1))}\n"
    )
    escape = rows('{"recipient_id": "r1", "email": "a@example.com", "variables": {"name": "\\u001b[2J"}}\n', "jsonl")
    multiline = rows('recipient_id,email,address\nr1,a@example.com,"1 Main St\n Springfield"\n')

    assert wide[0].problem.startswith("variables: Dictionary should have at most 50 items")
    assert (
        escape[0].problem
        == "variables: variable 'name' holds a control character (only tab and line breaks are allowed)"
    )
    assert multiline[0].recipient.variables == {"address": "1 Main St\n Springfield"}


@pytest.mark.parametrize(
    "line, reason",
    [
        (
            '{"recipient_id": "r1", "email": "a@example.com", "variables": {"n": NaN}}',
            "not valid JSON: NaN is not JSON",
        ),
        (
            '{"recipient_id": "r1", "email": "a@example.com", "variables": {"n": 1' + "0" * 5000 + "}}",
            "not valid JSON: a value cannot be read",
        ),
        ("[" * 5000 + "]" * 5000, "not valid JSON: nested deeper than 32 levels"),
        (
            '{"recipient_id": "r1", "email": "a@example.com", "variables": {"n": "\\ud800"}}',
            "not valid JSON: a string holds a lone surrogate",
        ),
    ],
)
def test_hostile_json_lines_are_bad_rows_with_a_reason_never_a_traceback(line, reason):
    [row] = rows(line + "\n", "jsonl", name="people.jsonl")

    assert row.line == 1 and row.recipient is None
    assert row.problem.startswith(reason)


@pytest.mark.parametrize(
    "text, message",
    [
        ("recipient_id,email\nr1,a@example.com\nr2,b@exa\x00mple.com\n", "people.csv:3: holds a NUL byte"),
        (
            "recipient_id,email\nr1,a@example.com\n" + "x" * (limits.RECIPIENT_LINE_BYTES + 1) + "\n",
            f"people.csv:3: line longer than {limits.RECIPIENT_LINE_BYTES:,} characters",
        ),
    ],
)
def test_a_binary_or_runaway_line_stops_the_file_with_its_line(text, message):
    with pytest.raises(RecipientFileError, match=message):
        rows(text)


def test_strict_json_loads_accepts_ordinary_json():
    assert strict_json_loads(b'{"a": [1, 2.5, "\\u00e9", null, true]}') == {"a": [1, 2.5, "\u00e9", None, True]}


# --- the same address under two recipient ids ------------------------------------------

PEOPLE = (
    "recipient_id,email\n"
    "r1,ann@example.com\n"
    "r2,ANN@Example.COM \n"  # the same mailbox, written otherwise
    "r3,ann+news@example.com\n"  # plus-addressing: another address
    "r4,bob@example.com\n"
)


def file_service():
    queue = FakeQueue()
    service = CampaignService(
        campaigns=FakeCampaignStore(), ledger=FakeLedger(), queue=queue, provider_names=["ses", "resend"]
    )
    service.create(
        Campaign(
            campaign_id="c1",
            name="n",
            provider="resend",
            sender="a@example.com",
            content=Content(subject="s", text="t"),
        )
    )
    return service, queue


def published_ids(queue: FakeQueue) -> list[str]:
    return [r.recipient_id for body in queue.published for r in BatchMessage.model_validate_json(body).recipients]


def test_an_address_repeated_under_another_id_is_reported_with_both_lines_and_sent_to_both_by_default():
    service, queue = file_service()
    reported = []

    report, tally = publish_file(
        service,
        "c1",
        lambda: RecipientReader(PEOPLE.splitlines(True), "csv", name="p.csv"),
        name="p.csv",
        strict=False,
        on_report=reported.append,
    )

    assert [(r.line, r.same_address_as) for r in reported] == [(3, 2)]
    assert describe_row(reported[0]).startswith("same address as line 2, under another recipient_id; published")
    assert (report.accepted, tally.duplicate_addresses, tally.bad) == (4, 1, 0)
    assert sorted(published_ids(queue)) == ["r1", "r2", "r3", "r4"]


def test_dedupe_addresses_sends_such_an_address_once_and_never_merges_plus_addresses():
    service, queue = file_service()
    reported = []

    report, tally = publish_file(
        service,
        "c1",
        lambda: RecipientReader(PEOPLE.splitlines(True), "csv", name="p.csv"),
        name="p.csv",
        strict=True,
        dedupe_addresses=True,
        on_report=reported.append,
    )

    assert report.accepted == 3 and tally.duplicate_addresses == 1
    assert sorted(published_ids(queue)) == ["r1", "r3", "r4"]
    assert (
        describe_row(reported[0], dedupe_addresses=True) == "same address as line 2; not published (dedupe addresses)"
    )


def test_reports_of_repeated_addresses_never_hold_the_address():
    reported = [r for r in rows(PEOPLE) if r.repeats_address]

    assert "ann" not in describe_row(reported[0]).lower()


def test_inline_recipients_are_checked_for_repeated_addresses_by_index():
    people = [
        InlineRecipient(recipient_id="r1", email="ann@example.com"),
        InlineRecipient(recipient_id="r2", email="Ann@EXAMPLE.com"),
    ]
    tally = RowTally(dedupe_addresses=True)

    assert [r.recipient_id for r in tally.recipients(inline_rows(people))] == ["r1"]
    assert describe_row(tally.kept[0], dedupe_addresses=True, where="recipients.").startswith(
        "same address as recipients."
    )


def test_an_inline_recipient_address_is_one_address_without_surrounding_space():
    for email in ("ann@example.com\r\nBcc: x@evil.example", " ann@example.com", "Ann <ann@example.com>"):
        with pytest.raises(ValidationError) as raised:
            InlineRecipient(recipient_id="r1", email=email)
        assert describe_validation_error(raised.value) == [("email", "not a valid email address")]
    assert json.loads(InlineRecipient(recipient_id="r1", email="ann@example.com").model_dump_json())["email"]


# --- template files stay inside the spec's folder -------------------------------------

SPEC_YAML = "id: c1\nname: n\nsubject: s\nfrom: a@example.com\nprovider: ses\nhtml_file: {ref}\n"


def spec_in(tmp_path, ref: str):
    folder = tmp_path / "spec"
    folder.mkdir(exist_ok=True)
    (folder / "campaign.yaml").write_text(SPEC_YAML.format(ref=ref))
    return folder / "campaign.yaml"


@pytest.mark.parametrize(
    "ref, reason",
    [
        ("/etc/passwd", "/etc/passwd: must be relative to the spec's folder, not absolute"),
        ("../secret.html", "../secret.html: outside the spec's folder"),
        ("sub/../../secret.html", "sub/../../secret.html: outside the spec's folder"),
        ("link.html", "link.html: outside the spec's folder"),  # a symlink pointing out
    ],
)
def test_a_template_outside_the_specs_folder_is_refused_with_the_field_named(tmp_path, ref, reason):
    from sendonce_ops.specs import SpecError, load_spec

    (tmp_path / "secret.html").write_text("<p>the operator's private file</p>")
    spec = spec_in(tmp_path, ref)
    (spec.parent / "link.html").symlink_to(tmp_path / "secret.html")

    with pytest.raises(SpecError) as raised:
        load_spec(spec)

    [problem] = raised.value.problems
    assert problem.startswith(f"{spec}:6: html_file: {reason}")
    assert "private" not in str(raised.value)


def test_a_template_inside_the_folder_is_read_even_through_a_subfolder_and_a_link_inside(tmp_path):
    from sendonce_ops.specs import load_spec

    spec = spec_in(tmp_path, "sub/../templates/t.html")
    (spec.parent / "templates").mkdir()
    (spec.parent / "sub").mkdir()
    (spec.parent / "templates" / "t.html").write_text("<p>inside</p>")

    assert load_spec(spec).html == "<p>inside</p>"


def test_a_template_file_over_its_limit_or_not_a_file_is_refused_before_it_is_read(tmp_path):
    from sendonce_ops.specs import SpecError, load_spec

    spec = spec_in(tmp_path, "big.html")
    (spec.parent / "big.html").write_bytes(b"x" * (limits.HTML_BYTES + 1))
    with pytest.raises(SpecError, match=r"campaign.yaml:6: html_file: big.html: larger than 200,000 bytes"):
        load_spec(spec)

    spec = spec_in(tmp_path, "folder")
    (spec.parent / "folder").mkdir()
    with pytest.raises(SpecError, match="html_file: folder: not a regular file"):
        load_spec(spec)


def test_the_providers_the_schema_lists_are_those_the_wiring_registers():
    from sendonce.adapters.providers import registry
    from sendonce_local.generated_files import campaign_spec_schema

    schema = campaign_spec_schema()
    batch = next(b for b in schema["oneOf"] if b["properties"]["delivery_mode"]["enum"] == ["batch"])
    assert set(schema["properties"]["provider"]["enum"]) == set(registry.names())
    assert batch["properties"]["provider"]["enum"] == list(registry.batch_names())

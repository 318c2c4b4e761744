"""An A/B campaign's spec (issue 33): `variants` and `test` become the campaign's content
variants and its AbTest; each refusal names its field, in a spec file (with its line) and in
the published schema alike; the schema refuses what the model refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import AFTER_PATTERN, describe_validation_error
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.campaigns.variants import AFTER_LEAST_S, AFTER_MOST_S, AbTest, Variant, duration_s
from sendonce.domain.errors import ConflictingRequestError
from sendonce_ops.specs import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[2]

BASE = {"id": "ab", "name": "Spring", "from": "News <news@example.com>", "provider": "resend"}
AB = {
    **BASE,
    "html": "<p>Hi {{ name }}</p>",
    "variants": [{"id": "A", "subject": "Hello {{ name }}"}, {"id": "B", "subject": "Spring is here", "text": "B"}],
    "test": {"share": 0.2, "pick_by": "opens", "after": "4h"},
    "tracking": {"opens": True},
}


def problems(spec: dict) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as raised:
        CampaignSpec.model_validate(spec)
    return describe_validation_error(raised.value)


def without(spec: dict, *keys: str) -> dict:
    return {k: v for k, v in spec.items() if k not in keys}


def test_variants_and_a_test_become_the_campaigns_variants_and_its_ab_test():
    campaign = CampaignSpec.model_validate(AB).to_campaign()

    assert campaign.content.variants == (
        Variant(id="A", subject="Hello {{ name }}"),
        Variant(id="B", subject="Spring is here", text="B"),
    )
    assert campaign.ab_test == AbTest(variants=("A", "B"), share=0.2, pick_by="opens", after_s=4 * 3600)
    assert campaign.decision is None
    # Without its own subject the campaign's is the first variant's (the control's).
    assert campaign.content.subject == campaign.subject == "Hello {{ name }}"
    assert campaign.content.html == "<p>Hi {{ name }}</p>" and campaign.content.text is None
    assert campaign.content.of_variant("B").model_dump() == {
        "subject": "Spring is here",
        "html": "<p>Hi {{ name }}</p>",
        "text": "B",
        "variants": (),
    }


def test_a_spec_without_variants_is_the_campaign_it_always_was():
    campaign = CampaignSpec.model_validate({**BASE, "subject": "Hi", "text": "Hello"}).to_campaign()

    assert (campaign.content.variants, campaign.ab_test, campaign.subject) == ((), None, "Hi")


def test_the_campaigns_own_subject_and_bodies_may_be_left_out_when_every_variant_has_its_own():
    spec = {
        **without(AB, "html"),
        "subject": "For listings",
        "variants": [{"id": "A", "subject": "a", "html": "<p>a</p>"}, {"id": "B", "subject": "b", "text": "b"}],
        "test": {"share": 0.5, "pick_by": "clicks", "after": "30m"},
        "tracking": {"clicks": True},
    }

    campaign = CampaignSpec.model_validate(spec).to_campaign()

    assert (campaign.content.subject, campaign.content.html, campaign.content.text) == ("For listings", None, None)
    assert (campaign.ab_test.pick_by, campaign.ab_test.after_s) == ("clicks", 1800)


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"variants": AB["variants"][:1]}, [("variants", "2 to 5 variants, got 1")]),
        ({"variants": [{"id": f"v{i}", "subject": "s"} for i in range(6)]}, [("variants", "2 to 5 variants, got 6")]),
        ({"test": {**AB["test"], "share": 0}}, [("test.share", "between 0 and 1, exclusive")]),
        ({"test": {**AB["test"], "share": 1}}, [("test.share", "between 0 and 1, exclusive")]),
        ({"test": {**AB["test"], "share": "0.2"}}, [("test.share", "between 0 and 1, exclusive")]),
        ({"test": {**AB["test"], "pick_by": "revenue"}}, [("test.pick_by", "must be opens or clicks")]),
        ({"test": {**AB["test"], "after": "soon"}}, [("test.after", "must be a duration from 1m to 30d")]),
        ({"test": {**AB["test"], "after": "31d"}}, [("test.after", "must be a duration from 1m to 30d")]),
        ({"test": {**AB["test"], "after": 14400}}, [("test.after", "must be a duration from 1m to 30d")]),
        ({"tracking": None}, [("test.pick_by", "opens needs tracking.opens: true")]),
        ({"tracking": {"clicks": True}}, [("test.pick_by", "opens needs tracking.opens: true")]),
        (
            {"variants": [{"id": "A b", "subject": "a"}, {"id": "B", "subject": "b"}]},
            [("variants.0.id", "must be 1-8 letters, digits, '_' or '-', starting with a letter or digit")],
        ),
        (
            {"variants": [{"id": "A", "subject": "a"}, {"id": "B12345678", "subject": "b"}]},
            [("variants.1.id", "must be 1-8 letters, digits, '_' or '-', starting with a letter or digit")],
        ),
        (
            {"variants": [{"id": "A", "subject": "a\r\nBcc: x@evil.example"}, {"id": "B", "subject": "b"}]},
            [("variants.0.subject", "must be one line without control characters (a tab is allowed)")],
        ),
        ({"variants": None}, [("variants", "may be left out, not null")]),
    ],
)
def test_a_bad_variant_or_test_is_refused_naming_its_field(change, refused):
    found = problems({**AB, **change})

    assert [field for field, _ in found] == [field for field, _ in refused]
    for (_, message), (_, expected) in zip(found, refused, strict=True):
        assert message.startswith(expected), message


def test_variants_and_test_come_together_and_the_refusal_names_the_missing_one():
    assert problems(without(AB, "test")) == [
        ("test", "required with variants: {share, pick_by, after} picks the winner")
    ]
    assert problems({**without(AB, "variants"), "subject": "Hi"}) == [
        ("variants", "required with test: 2 to 5 variants [{id, subject, html, text}, ...]")
    ]
    # Without variants there is no subject to stand in for the campaign's.
    assert problems(without(AB, "variants")) == [
        ("subject", "Field required"),
        ("variants", "required with test: 2 to 5 variants [{id, subject, html, text}, ...]"),
    ]


def test_a_campaign_without_html_or_text_needs_them_in_every_variant():
    spec = {
        **without(AB, "html"),
        "variants": [{"id": "A", "subject": "a", "html": "<p>a</p>"}, {"id": "B", "subject": "b"}],
    }

    assert problems(spec) == [("", "html or text is required (in the campaign, or in every variant: none in B)")]


def test_a_variant_id_given_twice_is_refused_when_the_campaign_is_made_naming_it():
    # Well formed by the schema (JSON Schema cannot say ids are unique): the API answers 409.
    spec = CampaignSpec.model_validate({**AB, "variants": [{"id": "A", "subject": "a"}, {"id": "A", "subject": "b"}]})

    with pytest.raises(ConflictingRequestError, match=r"^variants: variant id 'A' is given twice \(variants\.1\.id\)"):
        spec.to_campaign()


def test_each_variants_templates_have_the_campaigns_size_limits_and_all_of_them_one_items():
    euro = "\u20ac"  # three bytes in UTF-8
    over = euro * (limits.HTML_BYTES // 3 + 1)  # fewer characters than the limit, more bytes
    big = [{"id": v, "subject": v, "html": "x" * limits.HTML_BYTES} for v in ("A", "B")]

    assert problems({**AB, "variants": [{"id": "A", "subject": "a", "html": over}, AB["variants"][1]]}) == [
        ("variants.0.html", f"html is longer than {limits.HTML_BYTES:,} bytes (UTF-8); see docs/limits.md")
    ]
    assert [f for f, _ in problems({**AB, "variants": [AB["variants"][0], {"id": "B", "subject": "b", "text": "y" * (limits.TEXT_BYTES + 1)}]})] == ["variants.1.text"]  # fmt: skip
    assert problems({**AB, "variants": big}) == [
        (
            "variants",
            f"html and text of the campaign and its variants are longer than {limits.TEMPLATES_BYTES:,} bytes "
            "(UTF-8) together; see docs/limits.md",
        )
    ]


def test_the_largest_ab_campaign_the_spec_accepts_fits_one_dynamodb_item():
    # The content item holds the campaign's templates and every variant's.
    room = limits.TEMPLATES_BYTES - limits.TEXT_BYTES
    variants = [
        {"id": f"v{i}", "subject": "\u20ac" * limits.SUBJECT_CHARS, "html": "x" * (room // 5)} for i in range(5)
    ]
    spec = CampaignSpec.model_validate(
        {
            **without(AB, "html"),
            "subject": "\u20ac" * limits.SUBJECT_CHARS,
            "text": "y" * limits.TEXT_BYTES,
            "variants": variants,
        }
    )

    content = spec.to_campaign().content

    assert len(content.model_dump_json().encode()) < limits.DYNAMODB_ITEM_BYTES - 50_000


def test_the_after_pattern_is_exactly_the_durations_an_ab_test_takes():
    for unit, seconds in (("m", 60), ("h", 3600), ("d", 86_400)):
        for count in range(1, AFTER_MOST_S // seconds + 50):
            text = f"{count}{unit}"
            assert bool(re.match(AFTER_PATTERN, text)) == (AFTER_LEAST_S <= duration_s(text) <= AFTER_MOST_S), text
    for text in ("0m", "01h", "4 h", "4H", "1w", "4h ", ""):
        assert not re.match(AFTER_PATTERN, text), text


# --- the published schema says the same ------------------------------------------------


def spec_schema() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        json.loads((ROOT / "schemas" / "campaign-spec.v1.json").read_text(encoding="utf-8"))
    )


@pytest.mark.parametrize(
    "body",
    [
        AB,
        {
            **without(AB, "html"),
            "variants": [{"id": "A", "subject": "a", "text": "a"}, {"id": "B", "subject": "b", "html": "b"}],
        },  # fmt: skip
        {**AB, "test": {"share": 0.001, "pick_by": "clicks", "after": "43200m"}, "tracking": {"clicks": True}},
    ],
)
def test_a_spec_the_model_accepts_the_schema_accepts(body):
    CampaignSpec.model_validate(body)

    assert list(spec_schema().iter_errors(body)) == []


@pytest.mark.parametrize(
    "body",
    [
        without(AB, "test"),
        {**without(AB, "variants"), "subject": "Hi"},
        without(AB, "variants"),
        {**AB, "variants": AB["variants"][:1]},
        {**AB, "variants": None},
        {**AB, "subject": None},
        {**AB, "tracking": None},
        {**AB, "tracking": {"opens": False, "clicks": True}},
        {**AB, "test": {**AB["test"], "share": 0}},
        {**AB, "test": {**AB["test"], "share": 1}},
        {**AB, "test": {**AB["test"], "pick_by": "revenue"}},
        {**AB, "test": {**AB["test"], "after": "soon"}},
        {**AB, "test": {**AB["test"], "after": "721h"}},
        {**without(AB, "html"), "variants": [{"id": "A", "subject": "a", "html": "a"}, {"id": "B", "subject": "b"}]},
        {**AB, "variants": [{"id": "A", "subject": "a", "extra": 1}, {"id": "B", "subject": "b"}]},
    ],
)
def test_a_spec_the_model_refuses_the_schema_refuses(body):
    with pytest.raises(ValidationError):
        CampaignSpec.model_validate(body)

    assert list(spec_schema().iter_errors(body)) != []


# --- in a spec file ---------------------------------------------------------------------

SPEC_FILE = """\
id: ab
name: Spring
from: News <news@example.com>
provider: ses
html_file: body.html
tracking: {opens: true}
variants:
  - {id: A, subject: "Hello {{ name }}"}
  - {id: B, subject: Spring is here, html_file: b.html}
test: {share: 0.2, pick_by: opens, after: 4h}
"""


def test_a_spec_file_gives_variants_their_own_template_files(tmp_path):
    (tmp_path / "body.html").write_text("<p>Hi</p>")
    (tmp_path / "b.html").write_text("<p>Spring</p>")
    spec_path = tmp_path / "ab.yaml"
    spec_path.write_text(SPEC_FILE)

    campaign = load_spec(spec_path).to_campaign()

    assert campaign.content.html == "<p>Hi</p>"
    assert [v.html for v in campaign.content.variants] == [None, "<p>Spring</p>"]
    assert campaign.ab_test.after_s == 4 * 3600


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        # A rule across fields is located at the field it names (test: line 10).
        (
            ("tracking: {opens: true}", "tracking: {clicks: true}"),
            ":10: test.pick_by: opens needs tracking.opens: true",
        ),
        (("after: 4h", "after: soon"), ":10: test.after: must be a duration from 1m to 30d"),
        (("share: 0.2", "share: 1"), ":10: test.share: between 0 and 1, exclusive"),
        (("test: {share: 0.2, pick_by: opens, after: 4h}\n", ""), ": test: required with variants"),
        (("b.html", "../elsewhere.html"), ":7: variants.1.html_file: ../elsewhere.html: outside the spec's folder"),
    ],
)
def test_a_bad_ab_spec_file_names_the_field_and_its_line(tmp_path, edit, problem):
    (tmp_path / "body.html").write_text("<p>Hi</p>")
    (tmp_path / "b.html").write_text("<p>Spring</p>")
    spec_path = tmp_path / "ab.yaml"
    spec_path.write_text(SPEC_FILE.replace(*edit))

    with pytest.raises(SpecError) as raised:
        load_spec(spec_path)

    [found] = raised.value.problems
    assert found.startswith(f"{spec_path}{problem}"), found


def test_a_spec_file_without_any_body_says_where_one_may_go(tmp_path):
    spec_path = tmp_path / "ab.yaml"
    spec_path.write_text(SPEC_FILE.replace("html_file: body.html\n", "").replace(", html_file: b.html", ""))

    with pytest.raises(SpecError) as raised:
        load_spec(spec_path)

    assert raised.value.problems == [
        f"{spec_path}: html or text (or html_file / text_file) is required (in the campaign, or in every variant: "
        "none in A, B)"
    ]

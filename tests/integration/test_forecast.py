"""`sendonce campaign forecast` against moto's server (issue 32, items 1 and 5): the real CLI
reads the campaign, the suppression table and the shared limiter's slots, and writes nothing;
a malformed groups table or a missing file is a clear error."""

from __future__ import annotations

import boto3
import pytest

from sendonce.domain.deliverability.ports import SuppressionReason
from tests.integration.operator_helpers import as_json, sendonce, spec_file, write_csv

pytestmark = pytest.mark.integration


def test_the_forecast_counts_the_audience_per_group_and_writes_nothing(system, deliverability, tmp_path):
    sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    deliverability.suppressions.add("gone@gmail.com", SuppressionReason.UNSUBSCRIBED, "test")
    people = write_csv(
        tmp_path / "people.csv",
        [
            ("r1", "ann@gmail.com", "Ann"),
            ("r2", "gone@gmail.com", "Gone"),
            ("r3", "bob@hotmail.co.uk", "Bob"),
            ("r4", "cy@gmx.de", "Cy"),
            ("r1", "ann@gmail.com", "Ann"),  # repeated id
            ("r5", f"di@{system.domain}", "Di"),
        ],
    )
    groups = tmp_path / "groups.yaml"
    groups.write_text("gmx:\n  - gmx.*\n")
    before = boto3.client("dynamodb").scan(TableName=system.resources.campaigns_table)["Count"]

    result = as_json(
        sendonce(
            system, "campaign", "forecast", "c1", "--recipients", str(people), "--mailbox-groups", str(groups), "--json"
        )
    )

    assert (result["rows_read"], result["repeated_ids"], result["suppressed"], result["audience"]) == (6, 1, 1, 4)
    assert result["groups"] == {"google": 1, "microsoft": 1, "yahoo": 0, "apple": 0, "gmx": 1, "other": 1}
    # Nobody sends now: the whole configured rate (SENDONCE_RESEND_REQUESTS_PER_SECOND, 1,000/s here)
    assert result["campaigns_sharing"] == 0 and result["rate"] > 0 and result["eta_s"] < 1
    assert result["not_applied"] == [] and (result["bound_by"], result["group_caps"]) == ("rate", {})
    assert result["warmup_days"] is None  # its domain is not warming up
    assert "aws_total" in result["cost"]
    # The deployment's cap on Google (the consumer's settings): 1 Google recipient at 0.25/s, 4 s
    capped = as_json(
        sendonce(
            system,
            "campaign",
            "forecast",
            "c1",
            "--recipients",
            str(people),
            "--json",
            env={"SENDONCE_PACING": '{"google": 0.25}'},
        )
    )
    assert (capped["eta_s"], capped["bound_by"], capped["group_caps"]) == (4.0, "google cap", {"google": 0.25})
    assert boto3.client("dynamodb").scan(TableName=system.resources.campaigns_table)["Count"] == before
    assert system.operator.get("c1").state.value == "draft"  # nothing published
    # publish --dry-run prints the same forecast and publishes nothing either
    dry = as_json(sendonce(system, "campaign", "publish", "c1", "--recipients", str(people), "--dry-run", "--json"))
    assert (dry["audience"], "gmx" in dry["groups"], dry["groups"]["other"]) == (4, False, 2)  # the default table
    assert system.operator.get("c1").state.value == "draft"


def test_a_bad_groups_table_or_a_missing_file_is_a_clear_error(system, tmp_path):
    sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    people = write_csv(tmp_path / "people.csv", [("r1", "ann@gmail.com", "Ann")])
    groups = tmp_path / "groups.yaml"
    groups.write_text("mine:\n  - gmail.com\n")

    taken = sendonce(system, "campaign", "forecast", "c1", "--recipients", str(people), "--mailbox-groups", str(groups))
    missing = sendonce(system, "campaign", "forecast", "c1", "--recipients", str(tmp_path / "nope.csv"))
    unknown = sendonce(system, "campaign", "forecast", "nope", "--recipients", str(people))

    assert taken.exit_code == 2 and "'gmail.com' is already in group 'google'" in taken.stderr
    assert str(groups) in taken.stderr
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    assert unknown.exit_code != 0 and "nope" in unknown.stderr

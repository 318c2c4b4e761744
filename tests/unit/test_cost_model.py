"""`sendonce cost` held to what bench-scale measured (issue 35, item 4): for a campaign of
1,000,000 recipients sent as bench-scale sends them, the model's DynamoDB write units per
recipient are within 10 % of the write units per recipient bench-scale measured at its
largest size, and every writer the capture holds is one the model lists and prices.

The capture is src/sendonce_ops/cost/measured.json (`python -m bench.scale_writers` from a
`make bench-scale` run); each check is also run on a copy with one figure changed, to show
that it can fail."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest
from click.testing import CliRunner

from sendonce_ops.cost import WRITERS, Measured, campaign_cost, cost, render_text

RECIPIENTS = 1_000_000
TOLERANCE = 0.10


def capture() -> dict[str, Any]:
    return json.loads(resources.files("sendonce_ops.cost").joinpath("measured.json").read_text())


def captured_writers(data: dict[str, Any]) -> set[str]:
    """Every writer the capture names: in any campaign, in the fit or in the one-by-one campaign."""
    names = set(data["fit"]["write_units"]) | set(data["one_by_one"]["writers"])
    for campaign in data["campaigns"]:
        names |= set(campaign["writers"])
    return names


def discrepancies(data: dict[str, Any]) -> list[str]:
    """What keeps the model from telling this capture's campaigns truly ([] when nothing)."""
    how = data["how"]
    try:
        result = campaign_cost(RECIPIENTS, how["provider"], how["mode"], measured=Measured.from_dict(data))
    except ValueError as exc:  # a writer the model does not know
        return [str(exc)]
    found = []
    largest = max(data["campaigns"], key=lambda c: c["recipients"])
    measured = largest["write_units_per_recipient"]
    modelled = result.write_units / RECIPIENTS
    if abs(modelled - measured) > TOLERANCE * measured:
        found.append(
            f"model {modelled:.3f} write units per recipient at {RECIPIENTS:,}, bench-scale measured"
            f" {measured:.3f} at {largest['recipients']:,}"
        )
    listed = {w["writer"] for w in result.as_dict()["writers"]}
    text = render_text(result)
    found += [f"{name}: not listed by the model" for name in sorted(captured_writers(data) - listed)]
    found += [f"{name}: not in the command's text" for name in sorted(listed) if name not in text]
    return found


def test_the_capture_says_how_it_was_measured_and_at_two_sizes():
    data = capture()
    assert {"command", "measured_on", "commit", "provider", "mode", "method"} <= set(data["how"])
    assert data["how"]["command"].startswith("python -m bench.scale")
    sizes = sorted(c["recipients"] for c in data["campaigns"])
    assert len(sizes) >= 2 and sizes[0] < sizes[-1]
    for campaign in data["campaigns"]:
        assert sum(w["write_units"] for w in campaign["writers"].values()) == campaign["write_units"]
        assert campaign["provider_events"] > 0
    # every write bench-scale accounted was put under a writer the model describes
    assert [name for name in captured_writers(data) if "unclassified" in name] == []
    # and the engagement writers' units per first open or click, from a --tracking run
    tracking = data["tracking"]
    assert "--tracking" in tracking["command"] and tracking["firsts"] > 0
    assert set(tracking["write_units_per_first"]) == {
        "events: first opens and clicks",
        "events: unique opens and clicks per minute",
    }


def test_a_million_recipients_cost_what_bench_scale_measured_per_recipient_and_every_writer_is_listed():
    assert discrepancies(capture()) == []


def test_every_measured_writer_is_priced_from_the_capture():
    # Given the capture and the model's writers for a campaign like bench-scale's
    data = capture()
    how = data["how"]
    result = campaign_cost(RECIPIENTS, how["provider"], how["mode"])

    # Then each writer the capture fitted is priced with its fitted figures, none of them unclassified
    by_name = {w.writer.name: w for w in result.writers}
    for name, line in data["fit"]["write_units"].items():
        assert "unclassified" not in name
        assert by_name[name].fixed == line["fixed"]
        if by_name[name].writer.scales != "provider_event":
            assert by_name[name].per_recipient == pytest.approx(line["per_recipient"], abs=1e-4)
    assert {w.name for w in WRITERS} == set(by_name)  # every writer listed, measured or not


def test_a_figure_off_by_more_than_a_tenth_fails_the_check():
    # Given a copy of the capture whose consumer ledger writes the model takes at double
    data = copy.deepcopy(capture())
    data["fit"]["write_units"]["consumer: ledger claims and settles"]["per_recipient"] *= 2

    # Then the model no longer matches what bench-scale measured
    [found] = discrepancies(data)
    assert "write units per recipient" in found


def test_a_writer_the_model_does_not_know_fails_the_check():
    # Given a copy of the capture in which bench-scale met a writer no entry of WRITERS describes
    data = copy.deepcopy(capture())
    largest = max(data["campaigns"], key=lambda c: c["recipients"])
    new = "consumer: unclassified campaigns tally#<id> / -"
    largest["writers"][new] = {"write_units": 3 * largest["recipients"], "writes": largest["recipients"]}
    largest["write_units"] += 3 * largest["recipients"]
    largest["write_units_per_recipient"] += 3
    data["fit"]["write_units"][new] = {"fixed": 0.0, "per_recipient": 3.0}

    # Then the model refuses it, rather than leave its writes out
    [found] = discrepancies(data)
    assert new in found and "does not know" in found


def test_the_command_lists_every_writer_in_text_and_json():
    how = capture()["how"]
    args = ["--recipients", str(RECIPIENTS), "--provider", how["provider"], "--mode", how["mode"]]
    text = CliRunner().invoke(cost, args)
    as_json = CliRunner().invoke(cost, [*args, "--json"])

    assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
    data = json.loads(as_json.output)
    assert [w["writer"] for w in data["writers"]] == [w.name for w in WRITERS]
    assert all(w.name in text.output for w in WRITERS)
    assert data["dynamodb_write_units_per_recipient"] == pytest.approx(data["dynamodb_write_units"] / RECIPIENTS)
    assert data["measured"]["measured_on"] and "DynamoDB writes by writer" in text.output

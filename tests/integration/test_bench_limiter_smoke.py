"""`make bench-limiter` on a small scenario: its figures are the accountant's counts and
agree with each other (the full run's figures are in docs/fairness.md)."""

from __future__ import annotations

import boto3
import pytest

from bench.limiter import Scenario, measure, table_lines

pytestmark = pytest.mark.integration


def test_the_limiter_bench_counts_the_limiters_writes_per_send(system):
    scenario = Scenario("small", rate=20, instances=2, threads=2, campaigns=2, send_s=0.05)
    client, reader = boto3.client("dynamodb"), boto3.client("dynamodb")
    figures = measure(client, reader, system.resources.campaigns_table, scenario, slots=3, start=2_100_000_000.0)

    assert 0 < figures.sends <= 20 * 3 and figures.sends_per_s <= 20
    assert 0 < figures.writes <= figures.units
    assert figures.units_per_send == round(figures.units / figures.sends, 4)
    assert figures.ceiling_sends_per_s == round(1_000 * figures.sends / figures.units)
    assert 0.5 <= figures.jain <= 1.0
    assert table_lines([figures])[-1].startswith("| small | 20 | 2 × 2 | 2 |")

"""The model's send-window rules (tests/model/windows.py), replayed deterministically: a
window pause is resumed by its opening once; an operator's pause over it is not."""

from __future__ import annotations

import pytest
from moto import mock_aws

from sendonce.domain.models import CampaignState
from tests.model.test_delivery_model import ResendSingle

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture
def model(monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        state = ResendSingle()
        state.setup(first=2, families=frozenset({"window"}))
        yield state


@pytest.mark.parametrize("operator_pauses", [False, True])
def test_an_opening_resumes_the_windows_own_pause_once_and_never_an_operators(model, operator_pauses):
    model.w1_paused_by_its_window_then_perhaps_by_an_operator(operator_pauses=operator_pauses, times=2)
    model.nobody_of_w1_is_sent_outside_its_window()
    w1 = model.store.get("w1")
    assert model.w1_openings, "the window paused w1 waiting for an opening"
    assert w1.state is (CampaignState.PAUSED if operator_pauses else CampaignState.SENDING)
    model.rig.drain()
    model.nobody_of_w1_is_sent_outside_its_window()
    sent = {rid for (campaign, rid), n in model.provider.accepted.items() if campaign == "w1" and n}
    assert sent == (set() if operator_pauses else {"r0", "r1"})

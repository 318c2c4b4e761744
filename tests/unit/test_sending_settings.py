"""Where `campaign preview` and `test-send` get the consumer's settings (and `campaign create` its rates): the consumer
function's environment read from the stack, SENDONCE_* variables over it, the endpoints last."""

from __future__ import annotations

import pytest

from sendonce.contract import Output
from sendonce_ops.endpoints import ConsumerRates, Endpoints, EndpointsError, sending_settings


class _Clients:
    """A session whose CloudFormation and Lambda clients answer from dicts (no sockets)."""

    region_name = "eu-west-1"

    def __init__(self, outputs: dict[str, str], functions: dict[str, dict[str, str]]):
        self.outputs = outputs
        self.functions = functions
        self.read: list[str] = []

    def client(self, name: str) -> _Clients:
        self.read.append(name)
        return self

    def describe_stacks(self, StackName: str) -> dict:  # noqa: N803 - boto3's names
        return {"Stacks": [{"Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()]}]}

    def get_function_configuration(self, FunctionName: str) -> dict:  # noqa: N803
        return {"Environment": {"Variables": self.functions[FunctionName]}}


def endpoints(stack: str | None) -> Endpoints:
    return Endpoints(
        queue_url="https://sqs.example/q",
        dead_letter_queue_url="https://sqs.example/dlq",
        ledger_table="ledger",
        campaigns_table="campaigns",
        stack=stack,
    )


CONSUMER_ENV = {
    "SENDONCE_LEDGER_TABLE": "ledger",
    "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
    "SENDONCE_DEAD_LETTER_QUEUE_URL": "https://sqs.example/dlq",
    "SENDONCE_SUPPRESSIONS_TABLE": "suppressions",
    "SENDONCE_RESEND_API_KEY_SECRET": "sendonce/resend",
    "SENDONCE_UNSUBSCRIBE_KEY_SECRET": "sendonce/unsubscribe",
    "SENDONCE_UNSUBSCRIBE_BASE_URL": "https://u.example.com",
    "SENDONCE_RESEND_REQUESTS_PER_SECOND": "2",
}


def test_the_consumers_environment_is_read_from_the_stack_and_the_variables_win():
    session = _Clients({Output.CONSUMER_FUNCTION_NAME: "consumer-fn"}, {"consumer-fn": CONSUMER_ENV})

    settings = sending_settings(session, endpoints("Sendonce"), {"SENDONCE_RESEND_REQUESTS_PER_SECOND": "3"})

    assert (settings.suppressions_table, settings.resend_api_key_secret) == ("suppressions", "sendonce/resend")
    assert settings.unsubscribe_base_url == "https://u.example.com"
    assert settings.resend_requests_per_second == 3


def test_without_a_stack_only_the_variables_and_the_endpoints_count():
    session = _Clients({}, {})

    settings = sending_settings(session, endpoints(None), {"SENDONCE_SUPPRESSIONS_TABLE": "supp", "OTHER": "x"})

    assert session.read == []  # nothing read from AWS
    assert (settings.ledger_table, settings.suppressions_table, settings.resend_api_key_secret) == (
        "ledger",
        "supp",
        None,
    )


def test_settings_the_consumer_would_refuse_are_an_error_naming_the_variable():
    with pytest.raises(EndpointsError, match="SENDONCE_UNSUBSCRIBE_BASE_URL"):
        sending_settings(_Clients({}, {}), endpoints(None), {"SENDONCE_UNSUBSCRIBE_BASE_URL": "http://insecure"})


def test_the_clis_provider_rates_are_the_consumers_read_only_when_looked_up():
    session = _Clients({Output.CONSUMER_FUNCTION_NAME: "consumer-fn"}, {"consumer-fn": CONSUMER_ENV})

    rates = ConsumerRates(session, endpoints("Sendonce"), {"SENDONCE_SES_SEND_RATE": "200"})
    assert session.read == []  # built with the CLI's service: nothing read yet

    assert (rates.get("resend"), rates.get("ses"), rates.get("mailgun")) == (2.0, 200.0, None)
    assert session.read == ["cloudformation", "lambda"]  # once


def test_provider_rates_that_cannot_be_read_are_an_error_naming_max_rate():
    env = {"SENDONCE_RESEND_REQUESTS_PER_SECOND": "fast"}

    with pytest.raises(EndpointsError, match=r"^max_rate: .*SENDONCE_RESEND_REQUESTS_PER_SECOND"):
        ConsumerRates(_Clients({}, {}), endpoints(None), env).get("resend")

"""The synthesized template carries the behaviour the consumer's guarantees rely on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from infra.config import MAX_RECEIVE_COUNT
from infra.stack import OUTPUT_NAMES
from tests.infra.synthesis import FULL_CONTEXT, Synthesized

pytestmark = pytest.mark.infra

REQUIRED_ENVIRONMENT = (
    "SENDONCE_LEDGER_TABLE",
    "SENDONCE_CAMPAIGNS_TABLE",
    "SENDONCE_DEAD_LETTER_QUEUE_URL",
    "SENDONCE_SEND_CONCURRENCY",
    "SENDONCE_PROVIDER_TIMEOUT_SECONDS",
    "SENDONCE_SAFETY_MARGIN_MS",
    "SENDONCE_MAX_RECEIVE_COUNT",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
)


# --- how the template's parts point at each other ------------------------------------


def _ref(value: dict[str, Any]) -> str:
    if "Ref" in value:
        return value["Ref"]
    return value["Fn::GetAtt"][0]


def _event_source(synth: Synthesized) -> dict[str, Any]:
    return synth.only("AWS::Lambda::EventSourceMapping")[1]["Properties"]


def _consumer(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    function_id = _ref(_event_source(synth)["FunctionName"])
    return function_id, synth.resources[function_id]["Properties"]


def _source_queue(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    queue_id = _ref(_event_source(synth)["EventSourceArn"])
    return queue_id, synth.resources[queue_id]["Properties"]


def _dead_letter_queue(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    queue_id = _ref(_source_queue(synth)[1]["RedrivePolicy"]["deadLetterTargetArn"])
    return queue_id, synth.resources[queue_id]["Properties"]


def _environment(synth: Synthesized) -> dict[str, Any]:
    return _consumer(synth)[1]["Environment"]["Variables"]


def _consumer_statements(synth: Synthesized) -> list[dict[str, Any]]:
    role_id = _ref(_consumer(synth)[1]["Role"])
    statements = []
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _table(synth: Synthesized, partition_key: str) -> tuple[str, dict[str, Any]]:
    for table_id, table in synth.of_type("AWS::DynamoDB::Table").items():
        if {"AttributeName": partition_key, "KeyType": "HASH"} in table["Properties"]["KeySchema"]:
            return table_id, table
    raise AssertionError(f"no table keyed on {partition_key}")


def _alarm(synth: Synthesized, name: str) -> dict[str, Any]:
    for alarm in synth.of_type("AWS::CloudWatch::Alarm").values():
        if alarm["Properties"]["AlarmName"] == f"{synth.config.stack_name}-{name}":
            return alarm["Properties"]
    raise AssertionError(f"no alarm {name}")


# --- SQS event source and queues ----------------------------------------------------


def test_event_source_reports_batch_item_failures(assembly: Synthesized) -> None:
    # Without it one failed recipient batch would make SQS redeliver the whole batch.
    assembly.assertions.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "BatchSize": assembly.config.batch_size,
            "ScalingConfig": {"MaximumConcurrency": assembly.config.max_concurrency},
        },
    )


def test_event_source_concurrency_follows_the_send_rate(
    default_assembly: Synthesized, full_assembly: Synthesized
) -> None:
    # ceil(14/s x 0.25 s / 8) = 1 -> AWS minimum 2; ceil(200/s x 0.25 s / 8) = 7.
    assert _event_source(default_assembly)["ScalingConfig"]["MaximumConcurrency"] == 2
    assert _event_source(full_assembly)["ScalingConfig"]["MaximumConcurrency"] == 7


def test_visibility_timeout_is_at_least_six_function_timeouts(assembly: Synthesized) -> None:
    timeout = _consumer(assembly)[1]["Timeout"]
    visibility = _source_queue(assembly)[1]["VisibilityTimeout"]
    assert visibility >= 6 * timeout


def test_function_timeout_covers_a_full_batch(default_assembly: Synthesized) -> None:
    # ceil(100 / 8) rounds x 10 s + 20 s backoff + 5 s ledger + 15 s margin = 170 -> 180.
    assert _consumer(default_assembly)[1]["Timeout"] == 180
    assert _source_queue(default_assembly)[1]["VisibilityTimeout"] == 1080


def test_redrive_after_five_receives_matches_the_consumer(assembly: Synthesized) -> None:
    redrive = _source_queue(assembly)[1]["RedrivePolicy"]
    assert redrive["maxReceiveCount"] >= 5
    assert redrive["maxReceiveCount"] == MAX_RECEIVE_COUNT
    assert _environment(assembly)["SENDONCE_MAX_RECEIVE_COUNT"] == str(redrive["maxReceiveCount"])


def test_dead_letter_queue_keeps_messages_longer_than_the_source(assembly: Synthesized) -> None:
    source = _source_queue(assembly)[1]["MessageRetentionPeriod"]
    dead_letter = _dead_letter_queue(assembly)[1]["MessageRetentionPeriod"]
    assert dead_letter > source
    assert dead_letter == 14 * 24 * 3600


def test_queues_are_encrypted_and_refuse_plain_http(assembly: Synthesized) -> None:
    for queue_id, queue in (_source_queue(assembly), _dead_letter_queue(assembly)):
        assert queue["SqsManagedSseEnabled"] is True
        assembly.assertions.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": queue_id}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                            )
                        ]
                    )
                },
            },
        )


# --- tables -------------------------------------------------------------------------


def test_ledger_and_campaigns_tables_keys(assembly: Synthesized) -> None:
    _, ledger = _table(assembly, "campaign_id")
    assert ledger["Properties"]["KeySchema"] == [
        {"AttributeName": "campaign_id", "KeyType": "HASH"},
        {"AttributeName": "recipient_id", "KeyType": "RANGE"},
    ]
    _, campaigns = _table(assembly, "pk")
    assert campaigns["Properties"]["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    for table in (ledger, campaigns):
        assert {a["AttributeType"] for a in table["Properties"]["AttributeDefinitions"]} == {"S"}


def test_tables_on_demand_with_recovery_and_encryption_and_no_ttl(assembly: Synthesized) -> None:
    for table in assembly.of_type("AWS::DynamoDB::Table").values():
        properties = table["Properties"]
        assert properties["BillingMode"] == "PAY_PER_REQUEST"
        assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert properties["SSESpecification"]["SSEEnabled"] is True
        # A ledger record that expires lets a late replay send again.
        assert "TimeToLiveSpecification" not in properties


def test_stateful_resources_are_retained_by_default(default_assembly: Synthesized) -> None:
    stateful = ("AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::KMS::Key")
    for resource_type in stateful:
        for resource_id, resource in default_assembly.of_type(resource_type).items():
            assert resource.get("DeletionPolicy") == "Retain", resource_id
            assert resource.get("UpdateReplacePolicy") == "Retain", resource_id


def test_removal_policy_destroy_from_context(full_assembly: Synthesized) -> None:
    for resource_id, table in full_assembly.of_type("AWS::DynamoDB::Table").items():
        assert table.get("DeletionPolicy") == "Delete", resource_id


# --- the consumer function ----------------------------------------------------------


def test_consumer_runs_python_on_arm64(assembly: Synthesized) -> None:
    assembly.assertions.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "sendonce.handlers.consumer.lambda_handler",
            "Runtime": Match.string_like_regexp(r"^python3\.1[23]$"),
            "Architectures": ["arm64"],
            "MemorySize": 512,
        },
    )


def test_consumer_environment_names(assembly: Synthesized) -> None:
    environment = _environment(assembly)
    assert set(REQUIRED_ENVIRONMENT) <= set(environment)
    assert environment["POWERTOOLS_SERVICE_NAME"] == "sendonce"
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == "Sendonce"
    assert environment["LOG_LEVEL"] == "INFO"
    assert environment["SENDONCE_LEDGER_TABLE"] == {"Ref": _table(assembly, "campaign_id")[0]}
    assert environment["SENDONCE_CAMPAIGNS_TABLE"] == {"Ref": _table(assembly, "pk")[0]}
    assert environment["SENDONCE_DEAD_LETTER_QUEUE_URL"] == {"Ref": _dead_letter_queue(assembly)[0]}


def test_environment_satisfies_the_consumer_settings(assembly: Synthesized) -> None:
    """The Lambda code's own settings model accepts what the stack sets."""
    from sendonce.settings import ConsumerSettings

    placeholders = {
        "SENDONCE_LEDGER_TABLE": "ledger-table",
        "SENDONCE_CAMPAIGNS_TABLE": "campaigns-table",
        "SENDONCE_DEAD_LETTER_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
    }
    environment = {name: placeholders.get(name, value) for name, value in _environment(assembly).items()}
    assert all(isinstance(value, str) for value in environment.values()), environment

    settings = ConsumerSettings.from_env(environment)

    assert settings.max_receive_count == MAX_RECEIVE_COUNT
    assert settings.send_concurrency == assembly.config.send_concurrency
    # The consumer stops claiming with less than one provider call of time left.
    assert settings.safety_margin_ms >= settings.provider_timeout_seconds * 1000


def test_resend_secret_by_name_only_when_resend_is_a_provider(
    default_assembly: Synthesized, full_assembly: Synthesized
) -> None:
    assert "SENDONCE_RESEND_API_KEY_SECRET" not in _environment(default_assembly)
    assert _environment(full_assembly)["SENDONCE_RESEND_API_KEY_SECRET"] == FULL_CONTEXT["resend_api_key_secret_name"]


def test_secret_value_never_in_the_template(assembly: Synthesized) -> None:
    text = json.dumps(assembly.template)
    assert "resolve:secretsmanager" not in text
    assert "SecretString" not in text
    assert not assembly.of_type("AWS::SecretsManager::Secret")  # moto cannot create one either


def test_secret_read_scoped_to_the_named_secret(full_assembly: Synthesized) -> None:
    reads = [s for s in _consumer_statements(full_assembly) if "secretsmanager:GetSecretValue" in _as_list(s["Action"])]
    assert reads, "the consumer cannot read the Resend key"
    for statement in reads:
        for resource in _as_list(statement["Resource"]):
            assert resource != "*"
            assert f":secret:{FULL_CONTEXT['resend_api_key_secret_name']}-??????" in json.dumps(resource)


def test_ses_send_scoped_to_the_sender_identity(assembly: Synthesized) -> None:
    sends = [
        s
        for s in _consumer_statements(assembly)
        if any(action.startswith("ses:Send") for action in _as_list(s["Action"]))
    ]
    assert sends, "the consumer cannot send through SES"
    resources = [json.dumps(r) for s in sends for r in _as_list(s["Resource"])]
    assert '"*"' not in resources
    assert any(f":identity/{assembly.config.sender_domain}" in r for r in resources)
    if assembly.config.ses_configuration_set:
        assert any(f":configuration-set/{assembly.config.ses_configuration_set}" in r for r in resources)


def test_consumer_policy_has_no_wildcard_resource_but_the_quota_lookup(assembly: Synthesized) -> None:
    for statement in _consumer_statements(assembly):
        if "*" in _as_list(statement["Resource"]):
            # ses:GetAccount (the send-rate cap) has no resource-level permissions.
            assert _as_list(statement["Action"]) == ["ses:GetAccount"], statement


def test_consumer_may_write_the_tables_and_the_dead_letter_queue(assembly: Synthesized) -> None:
    statements = _consumer_statements(assembly)

    def allowed(action: str, resource_id: str) -> bool:
        return any(
            action in _as_list(s["Action"])
            and {"Fn::GetAtt": [resource_id, "Arn"]} in _as_list(s["Resource"])
            for s in statements
        )

    for table_id in (_table(assembly, "campaign_id")[0], _table(assembly, "pk")[0]):
        assert allowed("dynamodb:PutItem", table_id)
        assert allowed("dynamodb:UpdateItem", table_id)
        assert allowed("dynamodb:GetItem", table_id)
    assert allowed("sqs:SendMessage", _dead_letter_queue(assembly)[0])
    assert allowed("sqs:DeleteMessage", _source_queue(assembly)[0])


# --- on-call ------------------------------------------------------------------------

METRIC_ALARMS = {
    # name: (namespace, metric, threshold)
    "DuplicateSendsPrevented": ("Sendonce", "DuplicateSendsPrevented", 10),
    "UnknownOutcomes": ("Sendonce", "UnknownOutcomes", 0),
    "ProviderHalted": ("Sendonce", "SendFailuresHalt", 0),
    "ConsumerErrors": ("AWS/Lambda", "Errors", 0),
    "ConsumerThrottles": ("AWS/Lambda", "Throttles", 0),
}


def _topic_id(synth: Synthesized) -> str:
    return synth.only("AWS::SNS::Topic")[0]


def test_every_alarm_notifies_on_call_and_ignores_missing_data(assembly: Synthesized) -> None:
    topic = {"Ref": _topic_id(assembly)}
    alarms = assembly.of_type("AWS::CloudWatch::Alarm")
    assert len(alarms) >= 9
    for alarm in alarms.values():
        properties = alarm["Properties"]
        assert properties["AlarmActions"] == [topic], properties["AlarmName"]
        assert properties["TreatMissingData"] == "notBreaching"
        assert properties["ComparisonOperator"] == "GreaterThanThreshold"
        assert "docs/operations.md#" in properties["AlarmDescription"]


@pytest.mark.parametrize(("threshold", "severity"), [(0, "warning"), (100, "page")])
def test_dead_letter_queue_depth_alarms(assembly: Synthesized, threshold: int, severity: str) -> None:
    name = "DeadLetterQueueNotEmpty" if threshold == 0 else "DeadLetterQueueFlooded"
    alarm = _alarm(assembly, name)
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [_dead_letter_queue(assembly)[0], "QueueName"]}}
    ]
    assert alarm["Threshold"] == threshold
    assert alarm["AlarmDescription"].startswith(f"[{severity}]")


def test_stuck_queue_alarm_on_age_of_oldest_message(assembly: Synthesized) -> None:
    alarm = _alarm(assembly, "QueueStuck")
    assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [_source_queue(assembly)[0], "QueueName"]}}
    ]
    # Above one visibility timeout: a single retried batch ages that much legitimately.
    assert alarm["Threshold"] == assembly.config.queue_age_alarm_minutes * 60
    assert alarm["Threshold"] > _source_queue(assembly)[1]["VisibilityTimeout"]


@pytest.mark.parametrize("name", sorted(METRIC_ALARMS))
def test_metric_alarms(assembly: Synthesized, name: str) -> None:
    namespace, metric, threshold = METRIC_ALARMS[name]
    alarm = _alarm(assembly, name)
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Threshold"]) == (namespace, metric, threshold)
    if namespace == "Sendonce":
        # Powertools' default dimension: without it the alarm watches an empty series.
        assert alarm["Dimensions"] == [{"Name": "service", "Value": "sendonce"}]
        assert alarm["Period"] == 300
        assert alarm["Statistic"] == "Sum"
    else:
        assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": _consumer(assembly)[0]}}]


def test_provider_failure_rate_alarm_uses_metric_math(assembly: Synthesized) -> None:
    alarm = _alarm(assembly, "ProviderFailureRate")
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    expression = next(q for q in queries.values() if "Expression" in q)
    names = {
        q["MetricStat"]["Metric"]["MetricName"]: q["Id"] for q in queries.values() if "MetricStat" in q
    }
    assert set(names) == {"EmailsSent", "SendFailuresPermanent", "SendFailuresRetryable"}
    for query in queries.values():
        if "MetricStat" in query:
            assert query["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "service", "Value": "sendonce"}]
    assert expression["ReturnData"] is True
    for metric_id in names.values():
        assert metric_id in expression["Expression"]
    assert alarm["Threshold"] == 5


def test_on_call_topic_is_encrypted_and_alarms_may_publish(assembly: Synthesized) -> None:
    topic_id, topic = assembly.only("AWS::SNS::Topic")
    key_id = _ref(topic["Properties"]["KmsMasterKeyId"])
    key = assembly.resources[key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    assert any(
        s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        and "kms:GenerateDataKey*" in _as_list(s["Action"])
        for s in key["KeyPolicy"]["Statement"]
    )
    assembly.assertions.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "Topics": [{"Ref": topic_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}),
                        Match.object_like(
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                                "Action": "sns:Publish",
                            }
                        ),
                    ]
                )
            },
        },
    )


def test_on_call_subscriptions_from_context(default_assembly: Synthesized, full_assembly: Synthesized) -> None:
    assert not default_assembly.of_type("AWS::SNS::Subscription")
    subscriptions = {
        (s["Properties"]["Protocol"], s["Properties"]["Endpoint"])
        for s in full_assembly.of_type("AWS::SNS::Subscription").values()
    }
    assert subscriptions == {
        ("email", FULL_CONTEXT["oncall_email"]),
        ("https", FULL_CONTEXT["oncall_https_url"]),
    }


def test_dashboard_shows_sending_duplicates_failures_and_queues(assembly: Synthesized) -> None:
    _, dashboard = assembly.only("AWS::CloudWatch::Dashboard")
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "EmailsSent",
        "DuplicateSendsPrevented",
        "SendFailuresPermanent",
        "SendFailuresRetryable",
        "SendFailuresHalt",
        "SendFailuresAmbiguous",
        "UnknownOutcomes",
        "PoisonMessages",
        "DeadLetteredRecipients",
        "PayloadConflicts",
        "CampaignSkipsPaused",
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
    ):
        assert metric in body, metric


# --- outputs, names, tags -----------------------------------------------------------


def test_outputs_have_stable_names(assembly: Synthesized) -> None:
    assert set(assembly.template["Outputs"]) == set(OUTPUT_NAMES)
    outputs = assembly.template["Outputs"]
    assert outputs["QueueUrl"]["Value"] == {"Ref": _source_queue(assembly)[0]}
    assert outputs["DeadLetterQueueArn"]["Value"] == {"Fn::GetAtt": [_dead_letter_queue(assembly)[0], "Arn"]}
    assert outputs["LedgerTableName"]["Value"] == {"Ref": _table(assembly, "campaign_id")[0]}
    assert outputs["ConsumerFunctionName"]["Value"] == {"Ref": _consumer(assembly)[0]}


def test_stack_name_from_context(default_assembly: Synthesized, full_assembly: Synthesized) -> None:
    assert default_assembly.config.stack_name == "Sendonce"
    assert (full_assembly.outdir / "SendonceFull.template.json").exists()


def test_resources_tagged_with_the_project(assembly: Synthesized) -> None:
    for resource_type in ("AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Lambda::Function", "AWS::SNS::Topic"):
        for resource_id, resource in assembly.of_type(resource_type).items():
            assert {"Key": "project", "Value": "sendonce"} in resource["Properties"]["Tags"], resource_id

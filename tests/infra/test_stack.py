"""The synthesized template carries the behaviour the consumer's guarantees rely on.

Over 500 lines: one synthesized template, a test per property the guarantees rely on
(queues, tables, functions, alarms, APIs); the synthesis is shared
(tests/infra/synthesis.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from sendonce import contract
from sendonce.adapters.dynamodb import batch_records
from sendonce.contract import Metric, Output, env_name
from sendonce_cdk.config import MAX_RECEIVE_COUNT
from sendonce_cdk.providers.ses import configuration_set_name, tracked_configuration_set_name
from tests.infra.synthesis import FULL_CONTEXT, REPO_ROOT, Synthesized

pytestmark = pytest.mark.infra

# On the consumer in every configuration: its required settings, and the sizes the stack
# computes in place of the settings' defaults.
REQUIRED_ENVIRONMENT = (
    *(
        env_name(field)
        for field in (
            "ledger_table",
            "campaigns_table",
            "dead_letter_queue_url",
            "send_concurrency",
            "provider_timeout_seconds",
            "safety_margin_ms",
            "max_receive_count",
        )
    ),
    contract.POWERTOOLS_SERVICE_NAME,
    contract.POWERTOOLS_METRICS_NAMESPACE,
    "LOG_LEVEL",
)


# --- how the template's parts point at each other ------------------------------------


def _ref(value: dict[str, Any]) -> str:
    if "Ref" in value:
        return value["Ref"]
    return value["Fn::GetAtt"][0]


def _event_source(synth: Synthesized) -> dict[str, Any]:
    """The campaign queue's mapping (the counters' aggregator has two on the tables' streams,
    the jobs worker one on the jobs queue)."""
    consumers = {
        i
        for i, r in synth.of_type("AWS::Lambda::Function").items()
        if r["Properties"]["Handler"] == "sendonce.handlers.consumer.lambda_handler"
    }
    [properties] = [
        m["Properties"]
        for m in synth.of_type("AWS::Lambda::EventSourceMapping").values()
        if _ref(m["Properties"]["FunctionName"]) in consumers
    ]
    return properties


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


CONSUMER_HANDLER = "sendonce.handlers.consumer.lambda_handler"
API_HANDLER = "sendonce.handlers.api.lambda_handler"
EVENTS_HANDLER = "sendonce.handlers.events.lambda_handler"
UNSUBSCRIBE_HANDLER = "sendonce.handlers.unsubscribe.lambda_handler"
OPERATOR_ROUTES = {
    "GET /campaigns",
    "POST /campaigns",
    "GET /campaigns/{id}",
    "POST /campaigns/{id}/publish",
    "POST /campaigns/{id}/forecast",
    "POST /campaigns/{id}/pause",
    "POST /campaigns/{id}/resume",
    "POST /campaigns/{id}/cancel",
    "POST /campaigns/{id}/reschedule",
    "POST /campaigns/{id}/unschedule",
    "POST /campaigns/{id}/pick",
    "GET /campaigns/{id}/delivery-status",
    "POST /campaigns/{id}/reconcile",
    "POST /campaigns/{id}/audit",
    "GET /jobs/{id}",
    "POST /campaigns/{id}/preview",
    "POST /campaigns/{id}/test-sends",
    "GET /openapi.json",
}
UNSUBSCRIBE_ROUTES = {"GET /u/{token}", "POST /u/{token}"}
WEBHOOK_ROUTE = "POST /webhooks/resend"


def _function(synth: Synthesized, handler: str) -> tuple[str, dict[str, Any]]:
    found = [(k, r["Properties"]) for k, r in synth.of_type("AWS::Lambda::Function").items()
             if r["Properties"]["Handler"] == handler]  # fmt: skip
    assert len(found) == 1, f"expected one function running {handler}, found {len(found)}"
    return found[0]


def _function_environment(synth: Synthesized, handler: str) -> dict[str, Any]:
    return _function(synth, handler)[1]["Environment"]["Variables"]


def _statements(synth: Synthesized, handler: str) -> list[dict[str, Any]]:
    role_id = _ref(_function(synth, handler)[1]["Role"])
    statements = []
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _allows(statements: list[dict[str, Any]], action: str, resource: Any) -> bool:
    return any(action in _as_list(s["Action"]) and resource in _as_list(s["Resource"]) for s in statements)


def _routes(synth: Synthesized, api_id: str) -> dict[str, dict[str, Any]]:
    """Route key -> route properties, for one HTTP API."""
    return {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in synth.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["ApiId"] == {"Ref": api_id}
    }


def _api_with_route(synth: Synthesized, route_key: str) -> str:
    [api_id] = [
        _ref(r["Properties"]["ApiId"])
        for r in synth.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["RouteKey"] == route_key
    ]
    return api_id


def _operator_api(synth: Synthesized) -> str:
    return _api_with_route(synth, "POST /campaigns")


def _public_api(synth: Synthesized) -> str:
    return _api_with_route(synth, "POST /u/{token}")


def _route_function(synth: Synthesized, route: dict[str, Any]) -> str:
    """The logical id of the function a route's Lambda proxy integration invokes."""
    integration_id = _ref(route["Target"]["Fn::Join"][1][1])
    integration = synth.resources[integration_id]["Properties"]
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["PayloadFormatVersion"] == "2.0"
    return _ref(integration["IntegrationUri"])


def _stage(synth: Synthesized, api_id: str) -> dict[str, Any]:
    [stage] = [
        s["Properties"]
        for s in synth.of_type("AWS::ApiGatewayV2::Stage").values()
        if s["Properties"]["ApiId"] == {"Ref": api_id}
    ]
    return stage


def _with_placeholders(environment: dict[str, Any]) -> dict[str, str]:
    """The function's environment as Lambda would see it: tokens replaced by plausible values."""
    values = {}
    for name, value in environment.items():
        if isinstance(value, str):
            values[name] = value
        elif name.endswith("_URL"):
            values[name] = "https://sqs.us-east-1.amazonaws.com/123456789012/queue"
        elif name.endswith("_ROLE_ARN"):
            values[name] = "arn:aws:iam::123456789012:role/scheduler"
        elif name.endswith("_FUNCTION_ARN"):
            values[name] = "arn:aws:lambda:us-east-1:123456789012:function:scheduled-start"
        else:
            values[name] = "table-name"
    return values


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


def test_the_counters_read_both_tables_streams_retrying_bisecting_and_keeping_what_fails(
    assembly: Synthesized,
) -> None:
    tables = assembly.of_type("AWS::DynamoDB::Table")
    streams = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"]
        for m in assembly.of_type("AWS::Lambda::EventSourceMapping").values()
        if "StartingPosition" in m["Properties"]
    }
    ledger = next(t for t, r in tables.items() if r["Properties"]["KeySchema"][0]["AttributeName"] == "campaign_id")
    campaigns = next(t for t, r in tables.items() if r["Properties"]["KeySchema"][0]["AttributeName"] == "pk")
    assert set(streams) == {ledger, campaigns}
    for table_id, mapping in streams.items():
        assert tables[table_id]["Properties"]["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
        assert mapping["StartingPosition"] == "TRIM_HORIZON"
        assert mapping["BisectBatchOnFunctionError"] is True
        assert mapping["ParallelizationFactor"] == 1  # a key's records in order: the counters' rule needs it
        assert 0 < mapping["MaximumRetryAttempts"] <= 100
        assert "OnFailure" in mapping["DestinationConfig"]
    # Of the campaigns table only inserted batch records reach the function.
    [pattern] = [json.loads(f["Pattern"]) for f in streams[campaigns]["FilterCriteria"]["Filters"]]
    assert pattern == {"eventName": ["INSERT"], "dynamodb": {"Keys": {"sk": {"S": [{"prefix": "batch#"}]}}}}
    # the adapter's batch records begin so under every batch shard key; its markers and groups do not
    assert batch_records.RECORD_PREFIX == "batch#"
    assert not batch_records.ENQUEUED_PREFIX.startswith("batch#")
    assert not batch_records.GROUP_PREFIX.startswith("batch#")
    assert "FilterCriteria" not in streams[ledger]


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
    assert _environment(assembly)[env_name("max_receive_count")] == str(redrive["maxReceiveCount"])


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
                        [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
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


def test_tables_on_demand_with_recovery_and_encryption_and_only_the_campaigns_table_has_a_ttl(
    assembly: Synthesized,
) -> None:
    campaigns_id, _ = _table(assembly, "pk")
    for table_id, table in assembly.of_type("AWS::DynamoDB::Table").items():
        properties = table["Properties"]
        assert properties["BillingMode"] == "PAY_PER_REQUEST"
        assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert properties["SSESpecification"]["SSEEnabled"] is True
        if table_id == campaigns_id:
            # The limiter's one-second slots expire; nothing else there carries the attribute.
            assert properties["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
        else:
            # A ledger record that expires lets a late replay send again; a suppression is for good.
            assert "TimeToLiveSpecification" not in properties, table_id
    _, ledger = _table(assembly, "campaign_id")
    assert "TimeToLiveSpecification" not in ledger["Properties"]


def test_campaign_list_reads_a_sparse_keys_only_index_of_campaign_items(assembly: Synthesized) -> None:
    _, campaigns = _table(assembly, "pk")
    [index] = campaigns["Properties"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "campaigns-by-state"
    assert index["KeySchema"] == [
        {"AttributeName": "state", "KeyType": "HASH"},
        {"AttributeName": "campaign_id", "KeyType": "RANGE"},
    ]
    # Keys only: a campaign's per-message updates (counts, leases) never write to the index.
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    _, ledger = _table(assembly, "campaign_id")
    assert "GlobalSecondaryIndexes" not in ledger["Properties"]


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
    assert environment[contract.POWERTOOLS_SERVICE_NAME] == contract.SERVICE_NAME
    assert environment[contract.POWERTOOLS_METRICS_NAMESPACE] == contract.METRICS_NAMESPACE
    assert environment["LOG_LEVEL"] == "INFO"
    assert environment[env_name("ledger_table")] == {"Ref": _table(assembly, "campaign_id")[0]}
    assert environment[env_name("campaigns_table")] == {"Ref": _table(assembly, "pk")[0]}
    assert environment[env_name("dead_letter_queue_url")] == {"Ref": _dead_letter_queue(assembly)[0]}


def test_environment_satisfies_the_consumer_settings(assembly: Synthesized) -> None:
    """The Lambda code's own settings model accepts what the stack sets."""
    from sendonce.settings import ConsumerSettings

    placeholders = {
        env_name("ledger_table"): "ledger-table",
        env_name("campaigns_table"): "campaigns-table",
        env_name("suppressions_table"): "suppressions-table",
        env_name("dead_letter_queue_url"): "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
        # Where a send window's opening schedule goes (the stack's group, role and function).
        env_name("scheduler_role_arn"): "arn:aws:iam::123456789012:role/scheduler",
        env_name("scheduled_start_function_arn"): "arn:aws:lambda:us-east-1:123456789012:function:start",
    }
    environment = {name: placeholders.get(name, value) for name, value in _environment(assembly).items()}
    assert all(isinstance(value, str) for value in environment.values()), environment

    settings = ConsumerSettings.from_env(environment)
    assert settings.scheduler_group and settings.scheduler_role_arn and settings.scheduled_start_function_arn

    assert settings.max_receive_count == MAX_RECEIVE_COUNT
    assert settings.send_concurrency == assembly.config.send_concurrency
    # The consumer stops claiming with less than one provider call of time left.
    assert settings.safety_margin_ms >= settings.provider_timeout_seconds * 1000


def test_resend_secret_by_name_only_when_resend_is_a_provider(
    default_assembly: Synthesized, full_assembly: Synthesized
) -> None:
    assert env_name("resend_api_key_secret") not in _environment(default_assembly)
    assert _environment(full_assembly)[env_name("resend_api_key_secret")] == FULL_CONTEXT["resend_api_key_secret_name"]


def test_secret_value_never_in_the_template(assembly: Synthesized) -> None:
    text = json.dumps(assembly.template)
    assert "resolve:secretsmanager" not in text
    assert "SecretString" not in text
    assert not assembly.of_type("AWS::SecretsManager::Secret")  # moto cannot create one either


def test_secret_read_scoped_to_the_named_secret(full_assembly: Synthesized) -> None:
    reads = [s for s in _consumer_statements(full_assembly) if "secretsmanager:GetSecretValue" in _as_list(s["Action"])]
    resources = [json.dumps(r) for s in reads for r in _as_list(s["Resource"])]
    keys = ("resend_api_key_secret_name", "unsubscribe_key_secret_name")
    named = [f":secret:{FULL_CONTEXT[key]}-??????" for key in keys]
    # The Resend key and the unsubscribe key, each by name, nothing else.
    assert sorted(next((n for n in named if n in r), r) for r in resources) == sorted(named)


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
    # The stack's own configuration sets, one named in every SES send.
    assert any(f":configuration-set/{configuration_set_name(assembly.config)}" in r for r in resources)
    assert any(f':configuration-set/{tracked_configuration_set_name(assembly.config)}"' in r for r in resources)


def test_consumer_policy_has_no_wildcard_resource_but_the_quota_lookup(assembly: Synthesized) -> None:
    for statement in _consumer_statements(assembly):
        if "*" in _as_list(statement["Resource"]):
            # ses:GetAccount (the send-rate cap) has no resource-level permissions.
            assert _as_list(statement["Action"]) == ["ses:GetAccount"], statement


def test_consumer_may_write_the_tables_and_the_dead_letter_queue(assembly: Synthesized) -> None:
    # The exact lists per resource: test_permissions.py.
    statements = _consumer_statements(assembly)

    def allowed(action: str, resource_id: str) -> bool:
        return any(
            action in _as_list(s["Action"]) and {"Fn::GetAtt": [resource_id, "Arn"]} in _as_list(s["Resource"])
            for s in statements
        )

    ledger_id, campaigns_id = _table(assembly, "campaign_id")[0], _table(assembly, "pk")[0]
    for table_id in (ledger_id, campaigns_id):
        assert allowed("dynamodb:UpdateItem", table_id)
        assert allowed("dynamodb:GetItem", table_id)
    # Send groups and the rate limiter's state are puts on the campaigns table; the
    # ledger is only ever updated, conditionally.
    assert allowed("dynamodb:PutItem", campaigns_id)
    assert not allowed("dynamodb:PutItem", ledger_id)
    assert allowed("sqs:SendMessage", _dead_letter_queue(assembly)[0])
    assert allowed("sqs:DeleteMessage", _source_queue(assembly)[0])


# --- the operator API -----------------------------------------------------------------


def test_operator_api_routes_all_require_iam(assembly: Synthesized) -> None:
    routes = _routes(assembly, _operator_api(assembly))
    api_function = _function(assembly, API_HANDLER)[0]

    assert set(routes) == OPERATOR_ROUTES
    for key, route in routes.items():
        assert route["AuthorizationType"] == "AWS_IAM", key
        assert _route_function(assembly, route) == api_function, key


def test_operator_api_function_environment(assembly: Synthesized) -> None:
    from sendonce.settings import ApiSettings

    environment = _function_environment(assembly, API_HANDLER)

    assert environment[env_name("ledger_table")] == {"Ref": _table(assembly, "campaign_id")[0]}
    assert environment[env_name("campaigns_table")] == {"Ref": _table(assembly, "pk")[0]}
    assert environment[env_name("queue_url")] == {"Ref": _source_queue(assembly)[0]}
    assert environment[env_name("dead_letter_queue_url")] == {"Ref": _dead_letter_queue(assembly)[0]}
    # The handler's own settings model accepts exactly what the stack sets (an empty
    # Feedback-ID customer is left unset).
    sendonce_names = {name for name in environment if name.startswith(contract.ENV_PREFIX)}
    unset = set() if assembly.config.feedback_id_customer else {env_name("feedback_id_customer")}
    # No caps and no groups of its own: neither is set.
    unset |= {env_name(f) for f in ("mailbox_groups", "pacing", "warmup") if not getattr(assembly.config, f)}
    assert sendonce_names == {env_name(field) for field in ApiSettings.model_fields} - unset
    ApiSettings.from_env(_with_placeholders(environment))


def test_operator_api_function_answers_within_the_http_api_timeout(assembly: Synthesized) -> None:
    # An HTTP API waits at most 30 s for its integration.
    assert _function(assembly, API_HANDLER)[1]["Timeout"] < 30


def test_operator_api_writes_campaigns_reads_the_ledger_and_publishes(assembly: Synthesized) -> None:
    statements = _statements(assembly, API_HANDLER)

    campaigns = {"Fn::GetAtt": [_table(assembly, "pk")[0], "Arn"]}
    for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"):
        assert _allows(statements, action, campaigns), action
    ledger = {"Fn::GetAtt": [_table(assembly, "campaign_id")[0], "Arn"]}
    assert _allows(statements, "dynamodb:Query", ledger)
    for action in ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"):
        assert not _allows(statements, action, ledger), action
    assert _allows(statements, "sqs:SendMessage", {"Fn::GetAtt": [_source_queue(assembly)[0], "Arn"]})
    # Publishing never consumes, and the API only reads the suppression list (a forecast's
    # BatchGetItem): it never adds or removes a suppression.
    assert not _allows(statements, "sqs:ReceiveMessage", {"Fn::GetAtt": [_source_queue(assembly)[0], "Arn"]})
    suppressions = [s for s in statements if "Suppressions" in json.dumps(s["Resource"])]
    assert [_as_list(s["Action"]) for s in suppressions] == [["dynamodb:BatchGetItem"]]


def test_operator_api_reads_recipient_files_only_from_the_configured_bucket(
    default_assembly: Synthesized, full_assembly: Synthesized
) -> None:
    def s3_statements(synth: Synthesized) -> list[dict[str, Any]]:
        return [s for s in _statements(synth, API_HANDLER) if any(a.startswith("s3:") for a in _as_list(s["Action"]))]

    assert s3_statements(default_assembly) == []
    [statement] = s3_statements(full_assembly)
    assert _as_list(statement["Action"]) == ["s3:GetObject"]
    assert json.dumps(statement["Resource"]).endswith(f':s3:::{FULL_CONTEXT["recipients_bucket"]}/*"]]}}')


def test_http_api_stages_log_access_without_paths(assembly: Synthesized) -> None:
    for api_id in (_operator_api(assembly), _public_api(assembly)):
        stage = _stage(assembly, api_id)
        assert stage["StageName"] == "$default"
        assert stage["AutoDeploy"] is True
        log_group_id = _ref(stage["AccessLogSettings"]["DestinationArn"])
        assert assembly.resources[log_group_id]["Type"] == "AWS::Logs::LogGroup"
        fields = json.loads(stage["AccessLogSettings"]["Format"])
        assert fields["requestId"] == "$context.requestId"
        assert fields["routeKey"] == "$context.routeKey"
        # An unsubscribe token travels in the path: the log must not keep it.
        assert not any("$context.path" in value for value in fields.values())


def test_http_apis_are_throttled(assembly: Synthesized) -> None:
    # Every public route, with its own limits: test_flood_protection.py.
    operator = _stage(assembly, _operator_api(assembly))["DefaultRouteSettings"]
    assert operator["ThrottlingRateLimit"] > 0 and operator["ThrottlingBurstLimit"] > 0
    public = _stage(assembly, _public_api(assembly))["RouteSettings"]
    assert set(public) == set(_routes(assembly, _public_api(assembly)))
    for settings in public.values():
        assert settings["ThrottlingRateLimit"] > 0 and settings["ThrottlingBurstLimit"] > 0


def test_new_functions_have_no_wildcard_resource(assembly: Synthesized) -> None:
    for handler in (API_HANDLER, EVENTS_HANDLER, UNSUBSCRIBE_HANDLER):
        for statement in _statements(assembly, handler):
            for resource in _as_list(statement["Resource"]):
                assert resource != "*", (handler, statement)


def test_functions_run_python_on_arm64_with_their_own_log_group(assembly: Synthesized) -> None:
    consumer = _consumer(assembly)[1]  # one bundle, built for one Python and one architecture
    for handler in (CONSUMER_HANDLER, API_HANDLER, EVENTS_HANDLER, UNSUBSCRIBE_HANDLER):
        properties = _function(assembly, handler)[1]
        assert properties["Architectures"] == ["arm64"], handler
        assert properties["Runtime"] == consumer["Runtime"], handler
        assert properties["Code"] == consumer["Code"], handler
        log_group_id = _ref(properties["LoggingConfig"]["LogGroup"])
        assert assembly.resources[log_group_id]["Type"] == "AWS::Logs::LogGroup"


# --- deliverability: suppressions, unsubscribe, provider events --------------------


def test_suppressions_table_key(assembly: Synthesized) -> None:
    _, table = _table(assembly, "fp")
    assert table["Properties"]["KeySchema"] == [{"AttributeName": "fp", "KeyType": "HASH"}]
    assert table["Properties"]["AttributeDefinitions"] == [{"AttributeName": "fp", "AttributeType": "S"}]


def test_consumer_reads_the_suppression_list_before_sending(assembly: Synthesized) -> None:
    suppressions_id = _table(assembly, "fp")[0]
    statements = _consumer_statements(assembly)

    assert _environment(assembly)[env_name("suppressions_table")] == {"Ref": suppressions_id}
    assert _allows(statements, "dynamodb:GetItem", {"Fn::GetAtt": [suppressions_id, "Arn"]})
    assert not _allows(statements, "dynamodb:PutItem", {"Fn::GetAtt": [suppressions_id, "Arn"]})


def test_unsubscribe_links_only_with_a_base_url(default_assembly: Synthesized, full_assembly: Synthesized) -> None:
    default = _environment(default_assembly)
    assert env_name("unsubscribe_base_url") not in default
    assert env_name("unsubscribe_key_secret") not in default
    assert not [s for s in _consumer_statements(default_assembly) if s.get("Sid") == "ReadUnsubscribeKey"]

    full = _environment(full_assembly)
    assert full[env_name("unsubscribe_base_url")] == FULL_CONTEXT["unsubscribe_base_url"]
    assert full[env_name("unsubscribe_key_secret")] == FULL_CONTEXT["unsubscribe_key_secret_name"]
    [read] = [s for s in _consumer_statements(full_assembly) if s.get("Sid") == "ReadUnsubscribeKey"]
    assert f":secret:{FULL_CONTEXT['unsubscribe_key_secret_name']}-??????" in json.dumps(read["Resource"])


def test_every_email_composer_carries_the_feedback_id(
    default_assembly: Synthesized, full_assembly: Synthesized
) -> None:
    from sendonce.settings import ConsumerSettings

    # The consumer composes every email; the operator API's previews compose as it does, from
    # the consumer's settings read from the API function's own environment.
    for handler in (CONSUMER_HANDLER, API_HANDLER):
        default = ConsumerSettings.from_env(_with_placeholders(_function_environment(default_assembly, handler)))
        assert default.feedback_id.value("c1") == "c1:campaign::sendonce", handler
        full = ConsumerSettings.from_env(_with_placeholders(_function_environment(full_assembly, handler)))
        assert full.feedback_id.value("c1") == "c1:newsletter:acme-eu:acmemail", handler

    environment = _environment(full_assembly)
    assert environment[env_name("feedback_id_sender_id")] == FULL_CONTEXT["feedback_id_sender_id"]
    assert environment[env_name("feedback_id_stream")] == FULL_CONTEXT["feedback_id_stream"]
    assert environment[env_name("feedback_id_customer")] == FULL_CONTEXT["feedback_id_customer"]


def test_the_caps_per_mailbox_group_reach_every_function_that_reads_them(
    default_assembly: Synthesized, full_assembly: Synthesized
) -> None:
    from sendonce.settings import ConsumerSettings, EventsSettings

    # The consumer paces by them, the events function slows a group on its deferrals, and the
    # operator API refuses a campaign's cap on a group the deployment does not know.
    for handler, model in ((CONSUMER_HANDLER, ConsumerSettings), (EVENTS_HANDLER, EventsSettings)):
        full = model.from_env(_with_placeholders(_function_environment(full_assembly, handler)))
        assert full.group_pacing.caps == {"google": 40, "comcast": 5}, handler
        assert full.group_pacing.group_of("someone@comcast.net") == "comcast", handler
        default = model.from_env(_with_placeholders(_function_environment(default_assembly, handler)))
        assert default.group_pacing.caps == {}, handler
    consumer = ConsumerSettings.from_env(_with_placeholders(_function_environment(full_assembly, CONSUMER_HANDLER)))
    assert consumer.warmup_schedules.cap("news@mail.example.org", 1_796_600_000_000) == ("mail.example.org", 500)
    api = _function_environment(full_assembly, API_HANDLER)
    assert json.loads(api[env_name("pacing")]) == json.loads(FULL_CONTEXT["pacing"])
    assert json.loads(api[env_name("mailbox_groups")]) == json.loads(FULL_CONTEXT["mailbox_groups"])


def test_public_api_routes_authorize_themselves(assembly: Synthesized) -> None:
    routes = _routes(assembly, _public_api(assembly))
    expected = UNSUBSCRIBE_ROUTES | ({WEBHOOK_ROUTE} if ("resend" in assembly.config.providers) else set())

    assert set(routes) == expected
    for key, route in routes.items():
        # Mailbox providers and Resend cannot sign with SigV4: the token / Svix signature is checked.
        assert route["AuthorizationType"] == "NONE", key
        handler = EVENTS_HANDLER if key == WEBHOOK_ROUTE else UNSUBSCRIBE_HANDLER
        assert _route_function(assembly, route) == _function(assembly, handler)[0], key


def test_unsubscribe_function_environment_and_permissions(assembly: Synthesized) -> None:
    from sendonce.settings import UnsubscribeSettings

    environment = _function_environment(assembly, UNSUBSCRIBE_HANDLER)
    suppressions_id, ledger_id = _table(assembly, "fp")[0], _table(assembly, "campaign_id")[0]
    assert environment[env_name("suppressions_table")] == {"Ref": suppressions_id}
    assert environment[env_name("ledger_table")] == {"Ref": ledger_id}
    assert environment[env_name("unsubscribe_key_secret")] == assembly.config.unsubscribe_key_secret_name
    UnsubscribeSettings.from_env(_with_placeholders(environment))

    statements = _statements(assembly, UNSUBSCRIBE_HANDLER)
    dynamodb_actions = {
        (action, _ref(resource))
        for s in statements
        for action in _as_list(s["Action"])
        if action.startswith("dynamodb:")
        for resource in _as_list(s["Resource"])
        if isinstance(resource, dict) and "Fn::GetAtt" in resource
    }
    assert dynamodb_actions == {
        ("dynamodb:GetItem", suppressions_id),
        ("dynamodb:PutItem", suppressions_id),
        ("dynamodb:GetItem", ledger_id),
        ("dynamodb:UpdateItem", ledger_id),
    }
    [read] = [s for s in statements if "secretsmanager:GetSecretValue" in _as_list(s["Action"])]
    assert f":secret:{assembly.config.unsubscribe_key_secret_name}-??????" in json.dumps(read["Resource"])


def test_events_function_environment_and_permissions(assembly: Synthesized) -> None:
    from sendonce.settings import EventsSettings

    environment = _function_environment(assembly, EVENTS_HANDLER)
    EventsSettings.from_env(_with_placeholders(environment))
    statements = _statements(assembly, EVENTS_HANDLER)
    tables = {
        "campaign_id": env_name("ledger_table"),
        "pk": env_name("campaigns_table"),
        "fp": env_name("suppressions_table"),
    }
    writes = {"campaign_id": "dynamodb:UpdateItem", "pk": "dynamodb:UpdateItem", "fp": "dynamodb:PutItem"}
    for partition_key, variable in tables.items():
        table_id = _table(assembly, partition_key)[0]
        assert environment[variable] == {"Ref": table_id}
        assert _allows(statements, writes[partition_key], {"Fn::GetAtt": [table_id, "Arn"]}), partition_key
    # Transactions (annotation + counter) need no extra action: TransactWriteItems is
    # authorized per item by UpdateItem. The exact lists: test_permissions.py.
    reads = [s for s in statements if "secretsmanager:GetSecretValue" in _as_list(s["Action"])]
    if "resend" in assembly.config.providers:
        assert environment[env_name("resend_webhook_secret")] == assembly.config.resend_webhook_secret_name
        [read] = reads
        assert f":secret:{assembly.config.resend_webhook_secret_name}-??????" in json.dumps(read["Resource"])
    else:
        assert env_name("resend_webhook_secret") not in environment
        assert reads == []


def _ses_events_rule(assembly: Synthesized) -> tuple[str, dict]:
    """The rule of SES's sending events (the other rule is the account health check's schedule)."""
    [found] = [(i, r) for i, r in assembly.of_type("AWS::Events::Rule").items() if "EventPattern" in r["Properties"]]
    return found


def test_ses_events_rule_targets_the_events_function(assembly: Synthesized) -> None:
    from sendonce.adapters.providers.ses.events import SES_DETAIL_TYPES

    _, rule = _ses_events_rule(assembly)
    properties = rule["Properties"]
    events_id = _function(assembly, EVENTS_HANDLER)[0]

    assert "EventBusName" not in properties  # the default bus, where SES publishes
    pattern = properties["EventPattern"]
    assert pattern["source"] == ["aws.ses"]
    # Every detail-type the handler reads, and nothing it would ignore.
    assert set(pattern["detail-type"]) == set(SES_DETAIL_TYPES)
    names = [configuration_set_name(assembly.config), tracked_configuration_set_name(assembly.config)]
    assert pattern["detail"] == {"mail": {"tags": {"ses:configuration-set": names}}}
    [target] = properties["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [events_id, "Arn"]}
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 24 * 3600
    dead_letter_id = _ref(target["DeadLetterConfig"]["Arn"])
    assert assembly.resources[dead_letter_id]["Type"] == "AWS::SQS::Queue"
    assembly.assertions.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "FunctionName": {"Fn::GetAtt": [events_id, "Arn"]},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [_ses_events_rule(assembly)[0], "Arn"]},
        },
    )


def test_failed_ses_events_are_kept(assembly: Synthesized) -> None:
    # A complaint that is never applied is an address never suppressed.
    events_id = _function(assembly, EVENTS_HANDLER)[0]
    _, invoke_config = assembly.only("AWS::Lambda::EventInvokeConfig")
    properties = invoke_config["Properties"]
    assert properties["FunctionName"] == {"Ref": events_id}
    dead_letter_id = _ref(properties["DestinationConfig"]["OnFailure"]["Destination"])
    [target] = _ses_events_rule(assembly)[1]["Properties"]["Targets"]
    assert _ref(target["DeadLetterConfig"]["Arn"]) == dead_letter_id
    queue = assembly.resources[dead_letter_id]["Properties"]
    assert queue["MessageRetentionPeriod"] == 14 * 24 * 3600
    assert queue["SqsManagedSseEnabled"] is True
    assert _allows(_statements(assembly, EVENTS_HANDLER), "sqs:SendMessage", {"Fn::GetAtt": [dead_letter_id, "Arn"]})
    alarm = _alarm(assembly, "ProviderEventsDeadLettered")
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dead_letter_id, "QueueName"]}}]
    assert alarm["Threshold"] == 0


def test_the_ses_account_is_checked_every_five_minutes_and_a_stopped_account_pages(assembly: Synthesized) -> None:
    # Issue 32, item 4: a scheduled read of GetAccount; alarms on what it publishes.
    handler = "sendonce.handlers.account_health.lambda_handler"
    function_id, function = _function(assembly, handler)
    [(rule_id, rule)] = [
        (i, r) for i, r in assembly.of_type("AWS::Events::Rule").items() if "ScheduleExpression" in r["Properties"]
    ]
    [target] = rule["Properties"]["Targets"]
    assert rule["Properties"]["ScheduleExpression"] == "rate(5 minutes)"
    assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0  # the next check reads again
    assembly.assertions.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "FunctionName": {"Fn::GetAtt": [function_id, "Arn"]},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]},
        },
    )
    assert function["Environment"]["Variables"]["SENDONCE_PROVIDER"] == "ses"
    stopped, probation = _alarm(assembly, "AccountSendingStopped"), _alarm(assembly, "AccountOnProbation")
    assert (stopped["MetricName"], stopped["Statistic"], stopped["Threshold"]) == (
        "AccountSendingStopped",
        "Maximum",
        0,
    )
    assert stopped["AlarmDescription"].startswith("[page]")
    assert (probation["MetricName"], probation["Threshold"]) == ("AccountOnProbation", 0)
    assert probation["AlarmDescription"].startswith("[warning]")
    assert stopped["Period"] == 15 * 60  # three checks: one late check does not clear it


def test_ses_configuration_sets_publish_to_the_default_bus_and_only_the_tracked_one_opens_and_clicks(
    assembly: Synthesized,
) -> None:
    name, tracked = configuration_set_name(assembly.config), tracked_configuration_set_name(assembly.config)
    sets = {c["Properties"]["Name"]: cid for cid, c in assembly.of_type("AWS::SES::ConfigurationSet").items()}

    assert set(sets) == {name, tracked} and tracked == f"{name[:56]}-tracked"
    assert name == (assembly.context.get("ses_configuration_set") or f"{assembly.config.stack_name}-events")
    assert _environment(assembly)[env_name("ses_configuration_set")] == name
    assert _environment(assembly)[env_name("ses_tracked_configuration_set")] == tracked
    destinations = {
        d["Properties"]["ConfigurationSetName"]["Ref"]: d["Properties"]["EventDestination"]
        for d in assembly.of_type("AWS::SES::ConfigurationSetEventDestination").values()
    }
    sending = {"send", "delivery", "bounce", "complaint", "reject", "deliveryDelay", "renderingFailure"}
    for configuration_set, events in ((name, sending), (tracked, sending | {"open", "click"})):
        destination = destinations[sets[configuration_set]]
        assert destination["Enabled"] is True
        assert json.dumps(destination["EventBridgeDestination"]["EventBusArn"]).endswith(':event-bus/default"]]}')
        assert set(destination["MatchingEventTypes"]) == events, configuration_set
    _, rule = _ses_events_rule(assembly)
    assert {"Email Opened", "Email Clicked"} <= set(rule["Properties"]["EventPattern"]["detail-type"])


# --- on-call ------------------------------------------------------------------------

METRIC_ALARMS = {
    # name: (namespace, metric, threshold)
    "DuplicateSendsPrevented": (contract.METRICS_NAMESPACE, Metric.DUPLICATE_SENDS_PREVENTED, 10),
    "UnknownOutcomes": (contract.METRICS_NAMESPACE, Metric.UNKNOWN_OUTCOMES, 0),
    "ProviderHalted": (contract.METRICS_NAMESPACE, Metric.SEND_FAILURES_HALT, 0),
    "ConsumerErrors": ("AWS/Lambda", "Errors", 0),
    "ConsumerThrottles": ("AWS/Lambda", "Throttles", 0),
    # What sendonce/handlers/events.py emits when a brake pauses a campaign.
    "ComplaintBrakeTriggered": (contract.METRICS_NAMESPACE, Metric.COMPLAINT_BRAKE_TRIGGERED, 0),
    "BounceBrakeTriggered": (contract.METRICS_NAMESPACE, Metric.BOUNCE_BRAKE_TRIGGERED, 0),
    "EventsErrors": ("AWS/Lambda", "Errors", 0),
}
# The function each AWS/Lambda alarm watches, by handler.
ALARMED_FUNCTIONS = {
    "ConsumerErrors": "sendonce.handlers.consumer.lambda_handler",
    "ConsumerThrottles": "sendonce.handlers.consumer.lambda_handler",
    "EventsErrors": "sendonce.handlers.events.lambda_handler",
}


def _topic_id(synth: Synthesized) -> str:
    return synth.only("AWS::SNS::Topic")[0]


def test_every_alarm_notifies_on_call_and_ignores_missing_data(assembly: Synthesized) -> None:
    topic = {"Ref": _topic_id(assembly)}
    alarms = assembly.of_type("AWS::CloudWatch::Alarm")
    assert len(alarms) >= 13
    for alarm in alarms.values():
        properties = alarm["Properties"]
        assert properties["AlarmActions"] == [topic], properties["AlarmName"]
        assert properties["TreatMissingData"] == "notBreaching"
        assert properties["ComparisonOperator"] == "GreaterThanThreshold"
        assert "docs/operations.md#" in properties["AlarmDescription"]


def test_every_alarm_has_a_runbook_entry(assembly: Synthesized) -> None:
    runbook = (REPO_ROOT / "docs" / "operations.md").read_text()
    anchors = {line.removeprefix("### ").strip().lower() for line in runbook.splitlines() if line.startswith("### ")}
    for alarm in assembly.of_type("AWS::CloudWatch::Alarm").values():
        description = alarm["Properties"]["AlarmDescription"]
        assert description.rsplit("docs/operations.md#", 1)[1] in anchors, description


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
    if namespace == contract.METRICS_NAMESPACE:
        # Powertools' default dimension: without it the alarm watches an empty series.
        assert alarm["Dimensions"] == [{"Name": "service", "Value": contract.SERVICE_NAME}]
        assert alarm["Period"] == 300
        assert alarm["Statistic"] == "Sum"
    else:
        function_id = _function(assembly, ALARMED_FUNCTIONS[name])[0]
        assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]


def test_provider_failure_rate_alarm_uses_metric_math(assembly: Synthesized) -> None:
    alarm = _alarm(assembly, "ProviderFailureRate")
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    expression = next(q for q in queries.values() if "Expression" in q)
    names = {q["MetricStat"]["Metric"]["MetricName"]: q["Id"] for q in queries.values() if "MetricStat" in q}
    assert set(names) == {Metric.EMAILS_SENT, Metric.SEND_FAILURES_PERMANENT, Metric.SEND_FAILURES_RETRYABLE}
    for query in queries.values():
        if "MetricStat" in query:
            assert query["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "service", "Value": contract.SERVICE_NAME}]
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
        Metric.EMAILS_SENT,
        Metric.DUPLICATE_SENDS_PREVENTED,
        Metric.SEND_FAILURES_PERMANENT,
        Metric.SEND_FAILURES_RETRYABLE,
        Metric.SEND_FAILURES_HALT,
        Metric.SEND_FAILURES_AMBIGUOUS,
        Metric.UNKNOWN_OUTCOMES,
        Metric.POISON_MESSAGES,
        Metric.DEAD_LETTERED_RECIPIENTS,
        Metric.PAYLOAD_CONFLICTS,
        Metric.CAMPAIGN_SKIPS_PAUSED,
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
        Metric.COMPLAINTS,
        Metric.HARD_BOUNCES,
        Metric.SUPPRESSIONS_ADDED,
        Metric.RECIPIENTS_SUPPRESSED,
        Metric.COMPLAINT_BRAKE_TRIGGERED,
        Metric.BOUNCE_BRAKE_TRIGGERED,
    ):
        assert metric in body, metric


# --- outputs, names, tags -----------------------------------------------------------


def test_outputs_have_stable_names(assembly: Synthesized) -> None:
    # That they are exactly contract.Output: test_contract.py.
    outputs = assembly.template["Outputs"]
    assert outputs[Output.QUEUE_URL]["Value"] == {"Ref": _source_queue(assembly)[0]}
    assert outputs[Output.DEAD_LETTER_QUEUE_ARN]["Value"] == {"Fn::GetAtt": [_dead_letter_queue(assembly)[0], "Arn"]}
    assert outputs[Output.LEDGER_TABLE_NAME]["Value"] == {"Ref": _table(assembly, "campaign_id")[0]}
    assert outputs[Output.CONSUMER_FUNCTION_NAME]["Value"] == {"Ref": _consumer(assembly)[0]}
    assert outputs[Output.SUPPRESSIONS_TABLE_NAME]["Value"] == {"Ref": _table(assembly, "fp")[0]}
    assert outputs[Output.EVENTS_FUNCTION_NAME]["Value"] == {"Ref": _function(assembly, EVENTS_HANDLER)[0]}
    events_config = assembly.only("AWS::Lambda::EventInvokeConfig")[1]["Properties"]
    events_dead_letter_id = _ref(events_config["DestinationConfig"]["OnFailure"]["Destination"])
    assert outputs[Output.EVENTS_DEAD_LETTER_QUEUE_URL]["Value"] == {"Ref": events_dead_letter_id}


def test_api_urls_are_built_from_the_api_ids(assembly: Synthesized) -> None:
    # Ref, never Fn::GetAtt ApiEndpoint: moto skips HTTP APIs and fails a GetAtt on them.
    outputs = assembly.template["Outputs"]
    for output, api_id in ((Output.API_URL, _operator_api(assembly)), (Output.PUBLIC_API_URL, _public_api(assembly))):
        parts = outputs[output]["Value"]["Fn::Join"][1]
        assert parts[:3] == ["https://", {"Ref": api_id}, ".execute-api."], output
        assert parts[-1] == "/"


def test_stack_name_from_context(default_assembly: Synthesized, full_assembly: Synthesized) -> None:
    assert default_assembly.config.stack_name == "Sendonce"
    assert (full_assembly.outdir / "SendonceFull.template.json").exists()


def test_resources_tagged_with_the_project(assembly: Synthesized) -> None:
    for resource_type in ("AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Lambda::Function", "AWS::SNS::Topic"):
        for resource_id, resource in assembly.of_type(resource_type).items():
            assert {"Key": "project", "Value": "sendonce"} in resource["Properties"]["Tags"], resource_id

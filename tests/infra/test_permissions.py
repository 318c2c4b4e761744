"""Least privilege, read from the synthesized policies: each function holds exactly the
actions its code calls, per resource, and no role can delete, overwrite or scan the ledger.

The expected lists below come from reading the adapters each handler wires
(lambdas/sendonce/wiring/: one module per function): a new SDK call in the Lambda code
needs its action here and in sendonce_cdk/grants.py, on purpose. A TransactWriteItems is
authorized per item by the item's own action (PutItem, UpdateItem), so it never appears.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest

from sendonce_cdk.providers.ses import configuration_set_name, tracked_configuration_set_name
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra

CONSUMER_HANDLER = "sendonce.handlers.consumer.lambda_handler"
API_HANDLER = "sendonce.handlers.api.lambda_handler"
EVENTS_HANDLER = "sendonce.handlers.events.lambda_handler"
UNSUBSCRIBE_HANDLER = "sendonce.handlers.unsubscribe.lambda_handler"
AGGREGATOR_HANDLER = "sendonce.handlers.aggregator.lambda_handler"
SCHEDULED_START_HANDLER = "sendonce.handlers.scheduled_start.lambda_handler"
JOBS_HANDLER = "sendonce.handlers.jobs.lambda_handler"
ACCOUNT_HEALTH_HANDLER = "sendonce.handlers.account_health.lambda_handler"
HANDLERS = (
    CONSUMER_HANDLER,
    API_HANDLER,
    EVENTS_HANDLER,
    UNSUBSCRIBE_HANDLER,
    AGGREGATOR_HANDLER,
    SCHEDULED_START_HANDLER,
    JOBS_HANDLER,
    ACCOUNT_HEALTH_HANDLER,  # both assemblies deploy SES, whose account it reads
)

# The campaigns table as the API and the jobs worker use it (written out here, not imported
# from sendonce_cdk/grants.py: this test is the second reading).
CAMPAIGN_ITEMS = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:Query",
)

# What would let a role lose, overwrite or enumerate delivery records (issue 10).
LEDGER_FORBIDDEN = (
    "dynamodb:DeleteItem",
    "dynamodb:PutItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:Scan",
    "dynamodb:DeleteTable",
    "dynamodb:UpdateTable",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
    "dynamodb:RestoreTableFromBackup",
    "dynamodb:ImportTable",
)
LEDGER_READS = {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}
LOG_WRITES = {"logs:CreateLogStream", "logs:PutLogEvents"}
EVENT_SOURCE = {
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
}


# --- reading the template -------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _ref(value: dict[str, Any]) -> str:
    return value["Ref"] if "Ref" in value else value["Fn::GetAtt"][0]


def _table_id(synth: Synthesized, partition_key: str) -> str:
    for table_id, table in synth.of_type("AWS::DynamoDB::Table").items():
        if {"AttributeName": partition_key, "KeyType": "HASH"} in table["Properties"]["KeySchema"]:
            return table_id
    raise AssertionError(f"no table keyed on {partition_key}")


def _function(synth: Synthesized, handler: str) -> dict[str, Any]:
    [properties] = [
        r["Properties"]
        for r in synth.of_type("AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == handler
    ]
    return properties


def _labels(synth: Synthesized) -> dict[str, str]:
    """Logical id -> a readable name for the resources policies point at."""

    def queue_of(handler: str) -> str:
        function_ids = {
            i for i, r in synth.of_type("AWS::Lambda::Function").items() if r["Properties"]["Handler"] == handler
        }
        [mapping] = [
            m
            for m in synth.of_type("AWS::Lambda::EventSourceMapping").values()
            if _ref(m["Properties"]["FunctionName"]) in function_ids
        ]
        return _ref(mapping["Properties"]["EventSourceArn"])

    mappings = synth.of_type("AWS::Lambda::EventSourceMapping").values()
    queue_id, jobs_queue_id = queue_of(CONSUMER_HANDLER), queue_of(JOBS_HANDLER)
    [counters_dead_letter_id] = {
        _ref(m["Properties"]["DestinationConfig"]["OnFailure"]["Destination"])
        for m in mappings
        if "StartingPosition" in m["Properties"]
    }
    dead_letter_id = _ref(synth.resources[queue_id]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"])
    [invoke_config] = synth.of_type("AWS::Lambda::EventInvokeConfig").values()
    events_dead_letter_id = _ref(invoke_config["Properties"]["DestinationConfig"]["OnFailure"]["Destination"])
    labels = {
        _table_id(synth, "campaign_id"): "ledger",
        _table_id(synth, "pk"): "campaigns",
        _table_id(synth, "fp"): "suppressions",
        queue_id: "queue",
        dead_letter_id: "dead_letter_queue",
        jobs_queue_id: "jobs_queue",
        events_dead_letter_id: "events_dead_letter_queue",
        counters_dead_letter_id: "counters_dead_letter_queue",
    }
    for table_id, name in ((_table_id(synth, "campaign_id"), "ledger"), (_table_id(synth, "pk"), "campaigns")):
        labels[f"stream:{table_id}"] = f"{name}/stream"
    for handler in HANDLERS:
        labels[_ref(_function(synth, handler)["LoggingConfig"]["LogGroup"])] = f"logs:{handler.split('.')[2]}"
        labels[_function_id(synth, handler)] = f"function:{handler.split('.')[2]}"
    [scheduler_role] = [
        role_id
        for role_id, role in synth.of_type("AWS::IAM::Role").items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"].get("Service")
        == "scheduler.amazonaws.com"
    ]
    labels[scheduler_role] = "scheduler_role"
    return labels


def _function_id(synth: Synthesized, handler: str) -> str:
    [function_id] = [
        fid for fid, r in synth.of_type("AWS::Lambda::Function").items() if r["Properties"]["Handler"] == handler
    ]
    return function_id


def _resource_label(resource: Any, labels: dict[str, str]) -> str | None:
    if resource == "*":
        return "*"
    if isinstance(resource, dict) and ("Ref" in resource or "Fn::GetAtt" in resource):
        if resource.get("Ref") == "AWS::NoValue":
            return None
        if resource.get("Fn::GetAtt", [None, None])[1] == "StreamArn":
            return labels.get(f"stream:{_ref(resource)}", json.dumps(resource))
        return labels.get(_ref(resource), json.dumps(resource))
    if isinstance(resource, dict) and "Fn::Join" in resource:
        parts = resource["Fn::Join"][1]
        tables = [labels.get(_ref(p)) for p in parts if isinstance(p, dict) and "Fn::GetAtt" in p]
        if len(tables) == 1 and tables[0] and isinstance(parts[-1], str) and parts[-1].startswith("/index/"):
            return f"{tables[0]}{parts[-1]}"
        text = "".join(p if isinstance(p, str) else "" for p in parts)
        for marker in (":secret:", ":ses:", ":s3:::", ":scheduler:"):
            if marker in text:
                tail = text.split(marker, 1)[1]
                if marker in (":ses:", ":scheduler:"):
                    tail = tail.lstrip(":")  # region and account are intrinsics
                return f"{marker.strip(':')}:{tail}"
    return json.dumps(resource)


def _role_statements(synth: Synthesized, role_id: str) -> list[dict[str, Any]]:
    """Every statement that applies to a role: its inline policies, the AWS::IAM::Policy
    resources attached to it; a managed policy fails the test (its content is not here)."""
    role = synth.resources[role_id]["Properties"]
    assert not role.get("ManagedPolicyArns"), f"{role_id} has managed policies: {role['ManagedPolicyArns']}"
    statements = [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in synth.of_type(policy_type).values():
            if {"Ref": role_id} in policy["Properties"].get("Roles", []):
                statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _granted(synth: Synthesized, handler: str) -> dict[str, set[str]]:
    """Resource label -> the actions one function's role is allowed on it."""
    labels = _labels(synth)
    granted: dict[str, set[str]] = {}
    for statement in _role_statements(synth, _ref(_function(synth, handler)["Role"])):
        assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
        for resource in _as_list(statement["Resource"]):
            label = _resource_label(resource, labels)
            if label is not None:
                granted.setdefault(label, set()).update(_as_list(statement["Action"]))
    return granted


def _expected(synth: Synthesized, handler: str) -> dict[str, set[str]]:
    config = synth.config
    name = handler.split(".")[2]
    expected: dict[str, set[str]] = {f"logs:{name}": set(LOG_WRITES)}
    if handler == CONSUMER_HANDLER:
        expected |= {
            "ledger": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:UpdateItem"},
            # BatchGetItem: the limiter's state and slot items a reservation reads together.
            "campaigns": {
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:Query",
            },
            "suppressions": {"dynamodb:GetItem", "dynamodb:BatchGetItem"},
            "queue": set(EVENT_SOURCE),
            "dead_letter_queue": {"sqs:SendMessage"},
            # A send window's next opening, when the window pauses a campaign: set, never deleted.
            f"scheduler:schedule/{_schedule_group(synth)}/*": {"scheduler:CreateSchedule", "scheduler:UpdateSchedule"},
            "scheduler_role": {"iam:PassRole"},
        }
        if "ses" in config.providers:
            expected[f"ses:identity/{config.sender_domain}"] = {"ses:SendEmail"}
            expected[f"ses:configuration-set/{configuration_set_name(config)}"] = {"ses:SendEmail"}
            # A tracking campaign's emails (opens and clicks): the tracked configuration set.
            expected[f"ses:configuration-set/{tracked_configuration_set_name(config)}"] = {"ses:SendEmail"}
            expected["*"] = {"ses:GetAccount"}
        if "resend" in config.providers:
            expected[f"secret:{config.resend_api_key_secret_name}-??????"] = {"secretsmanager:GetSecretValue"}
        if config.unsubscribe_base_url:
            expected[f"secret:{config.unsubscribe_key_secret_name}-??????"] = {"secretsmanager:GetSecretValue"}
    elif handler == API_HANDLER:
        expected |= {
            "ledger": {"dynamodb:Query"},
            # GET /campaigns: the campaigns-by-state index (Query), then BatchGetItem; no Scan.
            "campaigns": set(CAMPAIGN_ITEMS),
            "campaigns/index/campaigns-by-state": {"dynamodb:Query"},
            "queue": {"sqs:SendMessage"},
            # One-time schedules per campaign in the stack's group, each passed the scheduler role.
            f"scheduler:schedule/{_schedule_group(synth)}/*": {
                "scheduler:CreateSchedule",
                "scheduler:UpdateSchedule",
                "scheduler:DeleteSchedule",
            },
            "scheduler_role": {"iam:PassRole"},
            "jobs_queue": {"sqs:SendMessage"},
            # A forecast's suppression reads, 100 addresses a BatchGetItem; never a write.
            "suppressions": {"dynamodb:BatchGetItem"},
        }
        if config.recipients_bucket:
            expected[f"s3:{config.recipients_bucket}/*"] = {"s3:GetObject"}
    elif handler == EVENTS_HANDLER:
        expected |= {
            "ledger": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
            # GetItem: a deferral reads its mailbox group's factor before cutting it.
            "campaigns": {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"},
            "suppressions": {"dynamodb:PutItem"},
            "events_dead_letter_queue": {"sqs:SendMessage"},
        }
        if "resend" in config.providers:
            expected[f"secret:{config.resend_webhook_secret_name}-??????"] = {"secretsmanager:GetSecretValue"}
    elif handler == AGGREGATOR_HANDLER:
        streams = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
        expected |= {
            "ledger/stream": streams,
            "campaigns/stream": streams,
            "*": {"dynamodb:ListStreams"},
            "campaigns": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"},
            "counters_dead_letter_queue": {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"},
        }
    elif handler == SCHEDULED_START_HANDLER:
        expected |= {
            # The completion check reads the ledger; the start never writes it.
            "ledger": {"dynamodb:Query"},
            # A window opening's resume: its republish job item (PutItem), on the jobs queue.
            "campaigns": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"},
            "queue": {"sqs:SendMessage"},
            "jobs_queue": {"sqs:SendMessage"},
        }
    elif handler == JOBS_HANDLER:
        expected |= {
            "ledger": {"dynamodb:BatchGetItem", "dynamodb:Query"},
            # A start's job reads a page's enqueued markers with one BatchGetItem.
            "campaigns": set(CAMPAIGN_ITEMS),
            "queue": {"sqs:SendMessage"},
            "jobs_queue": {"sqs:SendMessage", *EVENT_SOURCE},
            # A forecast_s3 job's parts read the suppression list; never a write.
            "suppressions": {"dynamodb:BatchGetItem"},
        }
        if "resend" in config.providers:
            # An audit job lists and retrieves the campaign's emails with the sending key.
            expected[f"secret:{config.resend_api_key_secret_name}-??????"] = {"secretsmanager:GetSecretValue"}
        if config.recipients_bucket:
            # An S3 publish's parts read their byte ranges.
            expected[f"s3:{config.recipients_bucket}/*"] = {"s3:GetObject"}
    elif handler == ACCOUNT_HEALTH_HANDLER:
        expected |= {
            # Its record (GetItem, PutItem); the sending campaigns (the index, then BatchGetItem)
            # and their pause (UpdateItem). Never the ledger.
            "campaigns": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
            "campaigns/index/campaigns-by-state": {"dynamodb:Query"},
            "*": {"ses:GetAccount"},
        }
    elif handler == UNSUBSCRIBE_HANDLER:
        expected |= {
            "suppressions": {"dynamodb:GetItem", "dynamodb:PutItem"},
            "ledger": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
            f"secret:{config.unsubscribe_key_secret_name}-??????": {"secretsmanager:GetSecretValue"},
        }
    return expected


def _schedule_group(synth: Synthesized) -> str:
    [group] = [r["Properties"]["Name"] for r in synth.of_type("AWS::Scheduler::ScheduleGroup").values()]
    return str(group)


def _may_cover_ledger(resource: Any, ledger_id: str) -> bool:
    """A resource that is, or may match, the ledger table (or its indexes)."""
    if isinstance(resource, str):
        return resource == "*" or ("dynamodb" in resource and "*" in resource)
    text = json.dumps(resource)
    return f'"{ledger_id}"' in text or ("dynamodb" in text and "table/*" in text)


# --- the ledger is append-only (issue 10) ----------------------------------------------


def test_no_role_may_delete_overwrite_or_scan_the_ledger(assembly: Synthesized) -> None:
    ledger_id = _table_id(assembly, "campaign_id")
    roles = assembly.of_type("AWS::IAM::Role")
    assert roles, "no roles in the template"
    offending = []
    for role_id in roles:
        for statement in _role_statements(assembly, role_id):
            if statement["Effect"] != "Allow":
                continue
            resources = _as_list(statement.get("Resource", []))
            if "NotResource" in statement or any(_may_cover_ledger(r, ledger_id) for r in resources):
                if "NotAction" in statement:
                    offending.append((role_id, "NotAction", statement["NotAction"]))
                    continue
                for pattern in _as_list(statement["Action"]):
                    # A wildcard (dynamodb:*, dynamodb:Delete*, *) counts as every action it matches.
                    hits = [a for a in LEDGER_FORBIDDEN if fnmatch.fnmatchcase(a.lower(), pattern.lower())]
                    if hits:
                        offending.append((role_id, pattern, hits))
    assert offending == []


def test_the_operator_api_only_reads_the_ledger(assembly: Synthesized) -> None:
    # Status and resume read records; cancel and pause are campaign state. Reopening
    # unknowns and redrives are the CLI's, with the operator's own credentials.
    ledger_actions = _granted(assembly, API_HANDLER)["ledger"]
    assert ledger_actions <= LEDGER_READS
    assert ledger_actions == {"dynamodb:Query"}


@pytest.mark.parametrize("handler", [API_HANDLER, JOBS_HANDLER], ids=lambda h: h.split(".")[2])
def test_a_forecast_may_read_the_suppression_list_and_the_limiters_slots_and_write_neither(
    assembly: Synthesized, handler: str
) -> None:
    # A forecast (inline in the API, an S3 file in the jobs worker) reads the suppression list
    # 100 addresses a consistent BatchGetItem, and who shares the provider's rate from the
    # limiter's slot items (Query) and state item (GetItem) in the campaigns table.
    granted = _granted(assembly, handler)
    assert granted["suppressions"] == {"dynamodb:BatchGetItem"}
    assert {"dynamodb:Query", "dynamodb:GetItem"} <= granted["campaigns"]
    # ... and each function is told which table is the suppression list.
    variables = _function(assembly, handler)["Environment"]["Variables"]
    assert _ref(variables["SENDONCE_SUPPRESSIONS_TABLE"]) == _table_id(assembly, "fp")


def test_ledger_writes_are_updates_only(assembly: Synthesized) -> None:
    # Every ledger write in the Lambda code is a conditional UpdateItem (or an Update in a
    # TransactWriteItems): no function needs anything else that writes.
    for handler in HANDLERS:
        actions = _granted(assembly, handler).get("ledger", set())
        assert actions <= LEDGER_READS | {"dynamodb:UpdateItem"}, handler


# --- least privilege per function (issue 13, finding 5) ---------------------------------


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.split(".")[2])
def test_each_function_holds_exactly_the_actions_its_code_calls(assembly: Synthesized, handler: str) -> None:
    granted = _granted(assembly, handler)
    expected = _expected(assembly, handler)

    extra = {label: granted[label] - expected.get(label, set()) for label in granted}
    missing = {label: expected[label] - granted.get(label, set()) for label in expected}
    assert {k: v for k, v in extra.items() if v} == {}, "actions the code never calls"
    assert {k: v for k, v in missing.items() if v} == {}, "actions the code calls but may not"


def test_every_function_role_is_its_own(assembly: Synthesized) -> None:
    # A shared role would hand one function's grants to another.
    roles = [_ref(_function(assembly, handler)["Role"]) for handler in HANDLERS]
    assert len(set(roles)) == len(HANDLERS)


# --- scheduled sends -----------------------------------------------------------------------


def test_the_scheduler_role_may_invoke_the_scheduled_start_function_only(assembly: Synthesized) -> None:
    labels = _labels(assembly)
    [role_id] = [r for r, label in labels.items() if label == "scheduler_role"]
    trust = assembly.resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Condition"]["StringEquals"] for s in trust] == [{"aws:SourceAccount": {"Ref": "AWS::AccountId"}}]
    granted: dict[str, set[str]] = {}
    for statement in _role_statements(assembly, role_id):
        for resource in _as_list(statement["Resource"]):
            granted.setdefault(_resource_label(resource, labels) or "", set()).update(_as_list(statement["Action"]))
    assert granted == {"function:scheduled_start": {"lambda:InvokeFunction"}}


@pytest.mark.parametrize("handler", [API_HANDLER, CONSUMER_HANDLER])
def test_the_api_and_the_consumer_pass_the_scheduler_role_to_eventbridge_scheduler_only(
    assembly: Synthesized, handler: str
) -> None:
    labels = _labels(assembly)
    statements = _role_statements(assembly, _ref(_function(assembly, handler)["Role"]))
    [passing] = [s for s in statements if "iam:PassRole" in _as_list(s["Action"])]
    assert [_resource_label(r, labels) for r in _as_list(passing["Resource"])] == ["scheduler_role"]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}

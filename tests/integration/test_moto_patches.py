"""sendonce_local.moto_patches against stock moto, in process.

Each test runs the same boto3 calls against stock moto and against moto patched through
the module ("defects": what every MotoServer runs; "speed": the demo's DemoMotoServer)
and checks that the answers agree, and that what differs is what the patch documents.
Patches are reverted after each use, so the rest of this process sees stock moto.
"""

from __future__ import annotations

import copy as copy_module
import cProfile
import io
import json
import os
import pstats
import re
import threading
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import boto3
import docker.errors
import moto
import pytest
import requests
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models.table import Table

from sendonce_local import moto_patches

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("stock", "defects", "speed")
PATCHED = ("defects", "speed")


def _in_process_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fake credentials and no endpoint: mock_aws serves only AWS's own URLs.
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(autouse=True)
def in_process_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process AWS, and stock moto before and after each test."""
    _in_process_aws(monkeypatch)
    assert moto_patches.applied() == ()
    yield
    moto_patches.revert()


@contextmanager
def moto_as(profile: str) -> Iterator[Any]:
    """In-process moto as stock, with the defect fixes, or with the speed patches too; a
    DynamoDB client for it."""
    with ExitStack() as stack:
        if profile != "stock":
            stack.enter_context(moto_patches.patched(speed=profile == "speed"))
        stack.enter_context(mock_aws())
        yield boto3.client("dynamodb")


# --- what sendonce's adapters do, as a transcript -----------------------------------------


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": _s(pk), "sk": _s(sk)}


CLAIM = {
    "UpdateExpression": "SET #state = :claimed, #owner = :me, lease_until_ms = :lease,"
    " history = list_append(if_not_exists(history, :empty), :entry) ADD attempts :one",
    "ConditionExpression": "attribute_not_exists(#state) OR #state = :queued"
    " OR (#state = :claimed AND lease_until_ms < :now)",
    "ExpressionAttributeNames": {"#state": "state", "#owner": "owner"},
    "ExpressionAttributeValues": {
        ":claimed": _s("claimed"),
        ":me": _s("worker-1"),
        ":lease": _n(2000),
        ":now": _n(1000),
        ":one": _n(1),
        ":queued": _s("queued"),
        ":empty": {"L": []},
        ":entry": {"L": [{"M": {"to": _s("claimed")}}]},
    },
}
TAKEOVER = {
    **CLAIM,
    "ExpressionAttributeValues": {
        **CLAIM["ExpressionAttributeValues"],
        ":me": _s("worker-2"),
        ":lease": _n(5000),
        ":now": _n(3000),
    },
}
MARK_SENT = {
    "UpdateExpression": "SET #state = :sent, provider_message_id = :mid REMOVE lease_until_ms",
    "ConditionExpression": "#owner = :me AND #state IN (:claimed, :in_flight)",
    "ExpressionAttributeNames": {"#state": "state", "#owner": "owner"},
    "ExpressionAttributeValues": {
        ":sent": _s("sent"),
        ":mid": _s("msg-1"),
        ":me": _s("worker-1"),
        ":claimed": _s("claimed"),
        ":in_flight": _s("in_flight"),
    },
}


def _outcome(call: Callable[..., dict[str, Any]], **params: Any) -> dict[str, Any]:
    """A call's answer without its request id, or its error as code, message,
    CancellationReasons and the old Item (what the ledger reads from a refusal)."""
    try:
        response = call(**params)
    except ClientError as exc:
        refusal = {"error": exc.response["Error"]["Code"], "message": exc.response["Error"]["Message"]}
        refusal.update({k: exc.response[k] for k in ("CancellationReasons", "Item") if k in exc.response})
        return refusal
    response.pop("ResponseMetadata", None)
    return response


def _ledger_tables(ddb: Any) -> None:
    ddb.create_table(
        TableName="ledger",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.create_table(
        TableName="tokens",
        KeySchema=[{"AttributeName": "fp", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "fp", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def ledger_transcript(ddb: Any) -> list[Any]:
    """Every kind of call sendonce's DynamoDB adapters make, including the refusals they
    read (conditions with ALL_OLD, cancelled transactions, invalid expressions), then every
    item left behind."""
    _ledger_tables(ddb)
    out: list[Any] = []

    def update(sk: str, pk: str = "c1", **params: Any) -> dict[str, Any]:
        return _outcome(ddb.update_item, TableName="ledger", Key=_key(pk, sk), **params)

    for i in range(12):
        item = {**_key("c1", f"r{i:02}"), "state": _s("queued"), "attempts": _n(0), "tags": {"SS": ["a", f"t{i}"]}}
        if i == 3:
            item["body"] = {"B": b"\x00binary\xff"}
        new = "attribute_not_exists(sk)"
        out.append(_outcome(ddb.put_item, TableName="ledger", Item=item, ConditionExpression=new))
    out.append(
        _outcome(
            ddb.put_item,
            TableName="ledger",
            Item={**_key("c1", "r00"), "state": _s("queued")},
            ConditionExpression="attribute_not_exists(sk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    )
    out.append(_outcome(ddb.put_item, TableName="tokens", Item={"fp": _s("f1"), "n": _n(1)}))

    # Claims: on an existing delivery, on a missing one (creates it), refused with ALL_OLD.
    out.append(update("r00", ReturnValues="ALL_NEW", **CLAIM))
    out.append(update("r50", ReturnValues="ALL_NEW", **CLAIM))
    out.append(update("r00", ReturnValuesOnConditionCheckFailure="ALL_OLD", **CLAIM))
    # A takeover once the lease ran out: the same expressions as the refused claim, other values.
    out.append(update("r00", ReturnValues="ALL_NEW", **TAKEOVER))
    out.append(update("r00", ReturnValues="UPDATED_OLD", **MARK_SENT))
    out.append(update("r50", ReturnValues="UPDATED_OLD", **MARK_SENT))
    out.append(update("r01", **MARK_SENT))
    out.append(
        update(
            "counter",
            pk="c9",
            UpdateExpression="ADD sent :one",
            ExpressionAttributeValues={":one": _n(1)},
            ReturnValues="UPDATED_NEW",
        )
    )

    # The shared rate limiter's reservations in one slot of capacity 5: 3, 2, then refused.
    for n in (3, 2, 1):
        out.append(
            update(
                "slot#100",
                pk="limiter#resend",
                UpdateExpression="ADD used :n SET expires_at = :exp",
                ConditionExpression="attribute_not_exists(used) OR used <= :room",
                ExpressionAttributeValues={":n": _n(n), ":room": _n(5 - n), ":exp": _n(160)},
                ReturnValues="UPDATED_NEW",
            )
        )

    # Invalid updates of an existing item: the same refusal, the item untouched.
    for expression, values in (
        ("SET a = :v, a = :w", {":v": _n(1), ":w": _n(2)}),
        ("SET a = :v SET b = :v", {":v": _n(1)}),
        ("SET a.b = :v, a = :w", {":v": _n(1), ":w": _n(2)}),
        ("ADD #state :v", {":v": _n(1)}),
        ("SET sk = :v", {":v": _s("other")}),
        ("SET a = :missing", {":v": _n(1)}),
    ):
        names = {"ExpressionAttributeNames": {"#state": "state"}} if "#" in expression else {}
        out.append(update("r02", UpdateExpression=expression, ExpressionAttributeValues=values, **names))

    # A group claim: one transaction of updates, a condition check and a put.
    out.append(
        _outcome(
            ddb.transact_write_items,
            TransactItems=[
                *({"Update": {"TableName": "ledger", "Key": _key("c1", f"r{i:02}"), **CLAIM}} for i in range(4, 8)),
                {
                    "ConditionCheck": {
                        "TableName": "tokens",
                        "Key": {"fp": _s("f1")},
                        "ConditionExpression": "attribute_exists(fp)",
                    }
                },
                {"Put": {"TableName": "tokens", "Item": {"fp": _s("f2"), "n": _n(2)}}},
            ],
        )
    )
    # Cancelled: a claim that loses, with a put into a new partition, a delete and a new
    # item: nothing of it stays, and the reasons name the loser with its old item.
    out.append(
        _outcome(
            ddb.transact_write_items,
            TransactItems=[
                {"Update": {"TableName": "ledger", "Key": _key("c1", "r08"), **CLAIM}},
                {
                    "Update": {
                        "TableName": "ledger",
                        "Key": _key("c1", "r04"),
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        **CLAIM,
                    }
                },
                {"Put": {"TableName": "ledger", "Item": {**_key("c2", "r00"), "state": _s("queued")}}},
                {"Update": {"TableName": "ledger", "Key": _key("c1", "r60"), **CLAIM}},
                {"Delete": {"TableName": "tokens", "Key": {"fp": _s("f1")}}},
                {"Put": {"TableName": "tokens", "Item": {"fp": _s("f3")}}},
            ],
        )
    )
    # Refused as a whole: one item twice; an invalid update expression.
    out.append(
        _outcome(
            ddb.transact_write_items,
            TransactItems=[
                {"Update": {"TableName": "ledger", "Key": _key("c1", "r09"), **CLAIM}},
                {"Update": {"TableName": "ledger", "Key": _key("c1", "r09"), **CLAIM}},
            ],
        )
    )
    out.append(
        _outcome(
            ddb.transact_write_items,
            TransactItems=[
                {"Update": {"TableName": "ledger", "Key": _key("c1", "r10"), **CLAIM}},
                {
                    "Update": {
                        "TableName": "ledger",
                        "Key": _key("c1", "r11"),
                        "UpdateExpression": "SET a = :v, a = :v",
                        "ExpressionAttributeValues": {":v": _n(1)},
                    }
                },
            ],
        )
    )

    # Reads: the ledger's pages both ways, from a start key, projected, filtered, counted,
    # by prefix (the campaign store's groups), of a missing partition; items one by one and
    # in batches.
    query = {"TableName": "ledger", "KeyConditionExpression": "pk = :c", "ConsistentRead": True}
    c1 = {":c": _s("c1")}
    for forward in (True, False):
        pages = ddb.get_paginator("query").paginate(
            ExpressionAttributeValues=c1, ScanIndexForward=forward, PaginationConfig={"PageSize": 5}, **query
        )
        out.append([_without_metadata(page) for page in pages])
    out.append(_outcome(ddb.query, ExpressionAttributeValues=c1, ExclusiveStartKey=_key("c1", "r05"), Limit=3, **query))
    out.append(
        _outcome(
            ddb.query,
            ExpressionAttributeValues=c1,
            ExclusiveStartKey=_key("c1", "r05"),
            ScanIndexForward=False,
            **query,
        )
    )
    out.append(
        _outcome(
            ddb.query,
            ExpressionAttributeValues=c1,
            ProjectionExpression="sk, #state, tags",
            ExpressionAttributeNames={"#state": "state"},
            **query,
        )
    )
    out.append(
        _outcome(
            ddb.query,
            ExpressionAttributeValues={**c1, ":q": _s("queued")},
            FilterExpression="#state = :q",
            ExpressionAttributeNames={"#state": "state"},
            Limit=6,
            **query,
        )
    )
    out.append(_outcome(ddb.query, ExpressionAttributeValues=c1, Select="COUNT", **query))
    out.append(
        _outcome(
            ddb.query,
            TableName="ledger",
            KeyConditionExpression="pk = :c AND begins_with(sk, :p)",
            ExpressionAttributeValues={**c1, ":p": _s("r0")},
        )
    )
    out.append(_outcome(ddb.query, ExpressionAttributeValues={":c": _s("nobody")}, **query))
    out.append(
        _outcome(
            ddb.query, TableName="tokens", KeyConditionExpression="fp = :f", ExpressionAttributeValues={":f": _s("f2")}
        )
    )
    out.append(_outcome(ddb.get_item, TableName="ledger", Key=_key("c1", "r03"), ConsistentRead=True))
    out.append(_outcome(ddb.get_item, TableName="ledger", Key=_key("c1", "r04"), ProjectionExpression="attempts"))
    out.append(_outcome(ddb.get_item, TableName="ledger", Key=_key("c1", "nobody")))
    batch = _outcome(
        ddb.batch_get_item,
        RequestItems={
            "ledger": {"Keys": [_key("c1", "r00"), _key("c1", "r07"), _key("c1", "nobody")], "ConsistentRead": True},
        },
    )
    batch["Responses"]["ledger"].sort(key=lambda item: item["sk"]["S"])
    out.append(batch)
    for table in ("ledger", "tokens"):
        out.append(ddb.describe_table(TableName=table)["Table"]["ItemCount"])
        out.append(sorted(_scan(ddb, table), key=repr))
    return out


def _without_metadata(page: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in page.items() if k != "ResponseMetadata"}


def _scan(ddb: Any, table: str) -> list[dict[str, Any]]:
    return [item for page in ddb.get_paginator("scan").paginate(TableName=table) for item in page["Items"]]


@pytest.fixture(scope="module")
def stock_transcript() -> list[Any]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _in_process_aws(monkeypatch)
        with moto_as("stock") as ddb:
            return ledger_transcript(ddb)


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_answers_the_ledger_s_calls_as_stock_moto_does(profile: str, stock_transcript: list[Any]) -> None:
    # Given the transcript of every kind of ledger call against stock moto (it does refuse
    # some of them: the transcript must hold refusals too)
    refusals = [entry for entry in stock_transcript if isinstance(entry, dict) and "error" in entry]
    assert {r["error"] for r in refusals} >= {
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
        "ValidationException",
    }

    # When the same calls run against patched moto
    with moto_as(profile) as ddb:
        patched = ledger_transcript(ddb)

    # Then every answer, refusal and item left behind is the same
    assert patched == stock_transcript


# --- defect fixes: what they change ---------------------------------------------------------


def _filled_ledger(ddb: Any, items: int) -> None:
    _ledger_tables(ddb)
    for i in range(items):
        ddb.put_item(TableName="ledger", Item={**_key("c1", f"r{i:03}"), "state": _s("queued")})


def _group_claim(ddb: Any, recipients: Iterable[int]) -> dict[str, Any]:
    return _outcome(
        ddb.transact_write_items,
        TransactItems=[{"Update": {"TableName": "ledger", "Key": _key("c1", f"r{i:03}"), **CLAIM}} for i in recipients],
    )


@pytest.mark.parametrize(("profile", "copies"), [("stock", 10), ("defects", 1), ("speed", 0)])
def test_a_transaction_copies_its_table_once_with_the_fixes_and_not_at_all_with_the_speed_patches(
    profile: str, copies: int
) -> None:
    with moto_as(profile) as ddb:
        # Given a ledger of 50 deliveries
        _filled_ledger(ddb, 50)
        # (moto tracks every instance it creates, table copies included: a copy is a new Table)
        before = len(Table.instances_tracked)

        # When two transactions claim 10 each, and a third is cancelled by its last item
        # (r000 is held already)
        assert "error" not in _group_claim(ddb, range(0, 10))
        tables_after_first = len(Table.instances_tracked)
        assert "error" not in _group_claim(ddb, range(10, 20))
        cancelled = _group_claim(ddb, [*range(20, 29), 0])

        # Then the table was copied `copies` times per transaction, and the cancelled one
        # rolled back all the same
        assert tables_after_first - before == copies
        assert len(Table.instances_tracked) - before == 3 * copies
        assert cancelled["error"] == "TransactionCanceledException"
        assert [r["Code"] for r in cancelled["CancellationReasons"]] == ["None"] * 9 + ["ConditionalCheckFailed"]
        states = {item["sk"]["S"]: item["state"]["S"] for item in _scan(ddb, "ledger")}
        assert [states[f"r{i:03}"] for i in range(20, 29)] == ["queued"] * 9
        assert [states[f"r{i:03}"] for i in range(0, 20)] == ["claimed"] * 20


def _answers_while_another_request_is_held(ddb: Any, owner: object, attribute: str, hold: Callable[[], Any]) -> bool:
    """Hold one request inside ``owner.attribute`` and ask for something else meanwhile:
    True when the second request was answered while the first was held."""
    entered, release = threading.Event(), threading.Event()
    stock = getattr(owner, attribute)

    def held(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "held":
            entered.set()
            release.wait(30)
        return stock(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, attribute, held)
        first = threading.Thread(target=hold, name="held")
        first.start()
        try:
            assert entered.wait(10), f"the request never reached {attribute}"
            answered = threading.Event()
            second = threading.Thread(target=lambda: (ddb.describe_table(TableName="tokens"), answered.set()))
            second.start()
            # Stock moto answers in milliseconds; the lock keeps it waiting as long as the
            # first request is held. Half a second tells the two apart on a loaded machine.
            answered_meanwhile = answered.wait(5 if _is_stock() else 0.5)
        finally:
            release.set()
            first.join(10)
        second.join(10)
        assert answered.is_set()
    return answered_meanwhile


def _is_stock() -> bool:
    return moto_patches.applied() == ()


@pytest.mark.parametrize(("profile", "answered"), [("stock", True), ("defects", False), ("speed", False)])
def test_the_backend_applies_one_call_at_a_time_with_the_fixes(profile: str, answered: bool) -> None:
    with moto_as(profile) as ddb:
        # Given a request held inside the backend's write of an item
        _ledger_tables(ddb)

        def put() -> None:
            ddb.put_item(TableName="ledger", Item=_key("c1", "r1"))

        # When another request comes meanwhile, then stock moto serves it at once (the race
        # behind "dictionary changed size during iteration"), patched moto after the first
        assert _answers_while_another_request_is_held(ddb, Table, "put_item", put) is answered


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine, even on a machine that has one."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/sendonce-no-docker.sock")


def _lambda_function() -> Any:
    iam = boto3.client("iam")
    role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return {}\n")
    boto3.client("lambda").create_function(
        FunctionName="fn", Runtime="python3.11", Role=role, Handler="index.handler", Code={"ZipFile": code.getvalue()}
    )
    from moto.awslambda.models import LambdaFunction

    return LambdaFunction.instances_tracked[-1]


def test_stock_moto_data_json_fails_once_a_lambda_function_exists_without_docker(no_docker: None) -> None:
    with moto_as("stock"):
        # Given a Lambda function and no Docker engine
        function = _lambda_function()

        # Then its docker_client raises DockerException only, and data.json fails with it
        with pytest.raises(docker.errors.DockerException) as raised:
            _ = function.docker_client
        assert not isinstance(raised.value, AttributeError)
        with pytest.raises(docker.errors.DockerException):
            requests.get("http://motoapi.amazonaws.com/moto-api/data.json", timeout=30)


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_data_json_skips_the_docker_probe(profile: str, no_docker: None) -> None:
    with moto_as(profile):
        # Given a Lambda function and no Docker engine
        function = _lambda_function()

        # Then its docker_client raises a DockerException that is an AttributeError too
        with pytest.raises(docker.errors.DockerException) as raised:
            _ = function.docker_client
        assert isinstance(raised.value, AttributeError)
        assert "Error while fetching server API version" in str(raised.value)

        # And data.json lists the function, without that one attribute
        response = requests.get("http://motoapi.amazonaws.com/moto-api/data.json", timeout=30)
        assert response.status_code == 200
        [listed] = response.json()["awslambda"]["LambdaFunction"]
        assert listed["function_name"] == "fn"
        assert "docker_client" not in listed


def _table_stack(*, upgraded: bool) -> str:
    """A stack with one table, and an output that reads its ARN (a Fn::GetAtt of it); the
    upgrade adds an index, a stream and a TTL, all updated in place by CloudFormation."""
    properties: dict[str, Any] = {
        "TableName": "ledger",
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
    }
    if upgraded:
        properties["AttributeDefinitions"] = [
            *properties["AttributeDefinitions"],
            {"AttributeName": "state", "AttributeType": "S"},
        ]
        properties["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "by-state",
                "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ]
        properties["StreamSpecification"] = {"StreamViewType": "NEW_AND_OLD_IMAGES"}
        properties["TimeToLiveSpecification"] = {"AttributeName": "expires_at", "Enabled": True}
    template: dict[str, Any] = {
        "Resources": {"Table": {"Type": "AWS::DynamoDB::Table", "Properties": properties}},
        "Outputs": {"Arn": {"Value": {"Fn::GetAtt": ["Table", "Arn"]}}},
    }
    if upgraded:  # a new resource that reads the stream's ARN, as a stream mapping does
        template["Resources"]["StreamName"] = {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Name": "stream", "Type": "String", "Value": {"Fn::GetAtt": ["Table", "StreamArn"]}},
        }
    return json.dumps(template)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_stack_update_keeps_a_changed_table_with_the_fixes_only(profile: str) -> None:
    with moto_as(profile):
        # Given a stack holding a table with an item in it
        cloudformation, dynamodb = boto3.client("cloudformation"), boto3.client("dynamodb")
        cloudformation.create_stack(StackName="s", TemplateBody=_table_stack(upgraded=False))
        dynamodb.put_item(TableName="ledger", Item={"pk": {"S": "kept"}, "state": {"S": "sent"}})

        # When an update adds an index, a stream and a TTL to it
        if profile == "stock":
            # Stock: the new resource reads a stream the table does not have yet, or the update
            # drops the table from the stack and the first read of its Fn::GetAtt fails.
            with pytest.raises(Exception, match="undefined resource|LatestStreamArn"):  # moto's error or botocore's
                cloudformation.update_stack(StackName="s", TemplateBody=_table_stack(upgraded=True))
                cloudformation.describe_stacks(StackName="s")
            return
        cloudformation.update_stack(StackName="s", TemplateBody=_table_stack(upgraded=True))

        # Then (patched) the same table holds the item and has the index, the stream and the TTL
        described = dynamodb.describe_table(TableName="ledger")["Table"]
        assert [i["IndexName"] for i in described["GlobalSecondaryIndexes"]] == ["by-state"]
        assert described["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
        parameter = boto3.client("ssm").get_parameter(Name="stream")["Parameter"]["Value"]
        assert parameter == described["LatestStreamArn"]
        ttl = dynamodb.describe_time_to_live(TableName="ledger")["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
        assert dynamodb.get_item(TableName="ledger", Key={"pk": {"S": "kept"}})["Item"]["state"] == {"S": "sent"}
        outputs = cloudformation.describe_stacks(StackName="s")["Stacks"][0]["Outputs"]
        assert outputs[0]["OutputValue"] == described["TableArn"]


def _streamed_table(ddb: Any) -> str:
    ddb.create_table(
        TableName="streamed",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    return str(ddb.describe_table(TableName="streamed")["Table"]["LatestStreamArn"])


def _stream_records(arn: str) -> list[dict[str, Any]]:
    # From the backend: in-process moto answers the Streams API "not yet implemented" (the
    # server answers it; sendonce_local/stream_poller.py and tests/integration/test_counters.py).
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    backend = dynamodbstreams_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    shard = backend._get_table_from_arn(arn).stream_shard
    return shard.get(shard.starting_sequence_number, 1000)


@pytest.mark.parametrize(("profile", "kept"), [("stock", 0), ("defects", 3), ("speed", 3)])
def test_a_disabled_stream_mapping_leaves_the_stream_to_its_reader_with_the_fixes(
    profile: str, kept: int, no_docker: None
) -> None:
    with moto_as(profile) as ddb:
        # Given a table's stream mapped to a function (which cannot run), the mapping disabled
        arn = _streamed_table(ddb)
        _lambda_function()
        mapping = boto3.client("lambda").create_event_source_mapping(
            EventSourceArn=arn, FunctionName="fn", StartingPosition="TRIM_HORIZON"
        )
        boto3.client("lambda").update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)

        # When three items are written
        for i in range(3):
            ddb.put_item(TableName="streamed", Item={"pk": _s(f"r{i}")})

        # Then (patched) a reader of the stream gets the three records; stock moto's failed
        # invoke took them
        records = _stream_records(arn)
        assert len(records) == kept
        assert len({r["dynamodb"]["SequenceNumber"] for r in records}) == kept


@pytest.mark.parametrize("profile", PROFILES)
def test_a_cancelled_transaction_leaves_no_stream_record(profile: str) -> None:
    with moto_as(profile) as ddb:
        # Given a streamed table holding one item
        arn = _streamed_table(ddb)
        ddb.put_item(TableName="streamed", Item={"pk": _s("taken")})

        # When a transaction puts a new item, then fails its condition on the existing one
        with pytest.raises(ClientError, match="TransactionCanceledException"):
            ddb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": "streamed", "Item": {"pk": _s("new")}}},
                    {
                        "Put": {
                            "TableName": "streamed",
                            "Item": {"pk": _s("taken")},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )

        # Then the stream holds the first put only (the speed patches drop the cancelled
        # writes' records with their items; stock restores the whole table, stream included)
        assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in _stream_records(arn)] == ["taken"]


# --- speed patches: what they save, and what they trade ---------------------------------------


def _calls(action: Callable[[], Any]) -> Counter[str]:
    """How often each function ran during ``action``: "moto/dynamodb/…/file.py:function"
    for moto's, "copy:deepcopy" for the copy module's, cProfile's own name for builtins."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        action()
    finally:
        profiler.disable()
    moto_root = str(Path(moto.__file__).resolve().parents[1]) + os.sep
    calls: Counter[str] = Counter()
    for (filename, _line, function), (_primitive, total, *_rest) in pstats.Stats(profiler).stats.items():
        if filename.startswith(moto_root):
            filename = filename[len(moto_root) :]
        elif filename == copy_module.__file__:
            filename = "copy"
        calls[f"{filename}:{function}"] += total
    return calls


def _claim(ddb: Any, sk: str) -> dict[str, Any]:
    return _outcome(ddb.update_item, TableName="ledger", Key=_key("c1", sk), **CLAIM)


@pytest.mark.parametrize(("profile", "parsed"), [("stock", True), ("defects", True), ("speed", False)])
def test_the_speed_patches_parse_an_expression_once(profile: str, parsed: bool) -> None:
    with moto_as(profile) as ddb:
        # Given a ledger where one claim has run
        _filled_ledger(ddb, 3)
        _claim(ddb, "r000")

        # When the same claim runs for another delivery
        calls = _calls(lambda: _claim(ddb, "r001"))

        # Then stock moto parses its update expression twice and its condition twice more;
        # with the speed patches both come from the cache
        assert calls["moto/dynamodb/parsing/expressions.py:make"] == (2 if parsed else 0)
        assert calls["moto/dynamodb/comparisons.py:parse"] == (2 if parsed else 0)


@pytest.mark.parametrize(("profile", "walks"), [("stock", 24), ("defects", 24), ("speed", 1)])
def test_the_speed_patches_check_an_update_s_paths_and_clauses_at_its_root(profile: str, walks: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 2)
        _claim(ddb, "r000")  # parsed (and, with the speed patches, cached) before counting

        calls = _calls(lambda: _claim(ddb, "r001"))

        # Stock moto checks every nested UpdateExpression node of the claim (24) for
        # overlapping paths and clause counts; the root holds them all
        assert calls["moto/dynamodb/parsing/validators.py:check_for_overlapping_paths"] == walks
        assert calls["moto/dynamodb/parsing/validators.py:verify_action_counts"] == walks
        # ...and rebuilds each traverser's node types for every node instead of once per traverser
        assert (calls["moto/dynamodb/parsing/ast_nodes.py:nodes_to_be_processed"] < 10) is (profile == "speed")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_speed_patches_copy_expression_trees_by_pickle(profile: str) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 2)
        _claim(ddb, "r000")

        calls = _calls(lambda: _claim(ddb, "r001"))

        # The validator's copy of the claim's tree, and list_append's copy of the history
        pickled = calls["~:<built-in method _pickle.dumps>"]
        assert pickled == (2 if profile == "speed" else 0)
        assert (calls["copy:deepcopy"] > 100) is (profile != "speed")


@pytest.mark.parametrize(("profile", "validations"), [("stock", 2), ("defects", 2), ("speed", 1)])
def test_the_speed_patches_validate_an_update_that_creates_its_item_once(profile: str, validations: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 1)
        _claim(ddb, "r000")

        calls = _calls(lambda: _claim(ddb, "new"))

        assert calls["moto/dynamodb/parsing/validators.py:validate"] == validations


@pytest.mark.parametrize(("profile", "leaves_key_only_item"), [("stock", False), ("defects", False), ("speed", True)])
def test_an_invalid_update_of_a_missing_item_leaves_a_key_only_item_with_the_speed_patches_only(
    profile: str, leaves_key_only_item: bool
) -> None:
    # The one documented difference in answers (updates_validated_once)
    with moto_as(profile) as ddb:
        _ledger_tables(ddb)

        # When an update with overlapping paths names a missing item
        refusal = _outcome(
            ddb.update_item,
            TableName="ledger",
            Key=_key("c1", "missing"),
            UpdateExpression="SET a = :v, a = :v",
            ExpressionAttributeValues={":v": _n(1)},
        )

        # Then it is refused the same way, but the speed patches leave the item's key behind
        assert refusal["error"] == "ValidationException"
        assert re.search(r"Two document paths overlap with each other", refusal["message"])
        left = _scan(ddb, "ledger")
        assert left == ([_key("c1", "missing")] if leaves_key_only_item else [])


@pytest.mark.parametrize(("profile", "listings"), [("stock", 4), ("defects", 4), ("speed", 0)])
def test_the_speed_patches_read_a_partition_without_listing_the_table(profile: str, listings: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 20)

        def pages(condition: str = "", **values: Any) -> list[dict[str, Any]]:
            return list(
                ddb.get_paginator("query").paginate(
                    TableName="ledger",
                    KeyConditionExpression="pk = :c" + condition,
                    ExpressionAttributeValues={":c": _s("c1"), **values},
                    PaginationConfig={"PageSize": 5},
                )
            )

        # A ledger's pages: stock moto lists the whole table for each of the 4
        assert _calls(pages)["moto/dynamodb/models/table.py:all_items"] == listings
        # A range-key condition (the campaign store's groups) goes to moto's own query
        by_prefix = _calls(lambda: pages(" AND begins_with(sk, :p)", **{":p": _s("r0")}))
        assert by_prefix["moto/dynamodb/models/table.py:all_items"] > 0


@pytest.mark.parametrize(("profile", "serialized"), [("stock", 1), ("defects", 1), ("speed", 0)])
def test_the_speed_patches_write_item_reads_as_json(profile: str, serialized: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 1)
        execute = "moto/core/responses.py:execute_result"

        for read in (
            lambda: ddb.get_item(TableName="ledger", Key=_key("c1", "r000")),
            lambda: ddb.batch_get_item(RequestItems={"ledger": {"Keys": [_key("c1", "r000")]}}),
            lambda: ddb.query(
                TableName="ledger", KeyConditionExpression="pk = :c", ExpressionAttributeValues={":c": _s("c1")}
            ),
            lambda: ddb.scan(TableName="ledger"),
        ):
            assert _calls(read)[execute] == serialized
        # Binary values (bytes in moto) and every other action keep moto's serializer
        ddb.put_item(TableName="ledger", Item={**_key("c1", "bin"), "body": {"B": b"\xff"}})
        assert _calls(lambda: ddb.get_item(TableName="ledger", Key=_key("c1", "bin")))[execute] == 1
        assert _calls(lambda: ddb.describe_table(TableName="ledger"))[execute] == 1


@pytest.mark.parametrize(("profile", "answered"), [("stock", True), ("defects", True), ("speed", False)])
def test_the_speed_patches_hold_the_lock_while_the_answer_is_written(profile: str, answered: bool) -> None:
    # queries_read_one_partition hands out live items: no write may run until they are written
    from moto.dynamodb.responses import DynamoResult

    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 1)

        def read() -> None:
            ddb.get_item(TableName="ledger", Key=_key("c1", "r000"))

        assert _answers_while_another_request_is_held(ddb, DynamoResult, "__init__", read) is answered


# --- applying: the version guard, twice, reverting ----------------------------------------------


def _moto_attributes() -> dict[tuple[str, str], int]:
    """Identity of every attribute of everything the patches touch."""
    import moto.dynamodb.comparisons as comparisons
    import moto.dynamodb.models as models
    import moto.dynamodb.parsing.ast_nodes as ast_nodes
    import moto.dynamodb.parsing.validators as validators
    import moto.dynamodb.responses as responses
    from moto.utilities.docker_utilities import DockerModel

    owners = (
        models,
        models.DynamoDBBackend,
        Table,
        DockerModel,
        responses,
        responses.DynamoHandler,
        comparisons.ConditionExpressionParser,
        validators,
        validators.OverlappingPathsValidator,
        validators.ActionCountValidator,
        ast_nodes.DepthFirstTraverser,
    )
    return {
        (repr(owner), name): id(value)
        for owner in owners
        for name, value in vars(owner).items()
        if name != "instances_tracked"  # moto's own record of instances, replaced by each mock_aws
    }


def test_moto_version_is_the_pin_in_constraints() -> None:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "constraints.txt").read_text(), re.MULTILINE))
    assert pins["moto"] == moto_patches.MOTO_VERSION == moto_patches.installed_moto_version()


def test_another_moto_version_is_refused_loudly_before_anything_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given another moto than the patches were written for
    monkeypatch.setattr(moto_patches, "installed_moto_version", lambda: "5.3.0")
    stock = _moto_attributes()

    # When the patches are applied, then they refuse, naming both versions and what to do
    for speed in (False, True):
        with pytest.raises(moto_patches.MotoVersionError) as refused:
            moto_patches.apply(speed=speed)
        message = str(refused.value)
        assert "moto 5.3.0 is installed" in message and f"written for moto {moto_patches.MOTO_VERSION}" in message
        assert "constraints.txt" in message and "MOTO_VERSION" in message

    # And moto is as it was
    assert moto_patches.applied() == ()
    assert _moto_attributes() == stock


def test_applying_twice_is_harmless_and_reverting_restores_stock_moto(stock_transcript: list[Any]) -> None:
    stock = _moto_attributes()

    # Given the patches applied
    first = moto_patches.apply(speed=True)
    patched = _moto_attributes()
    assert patched != stock
    assert first == tuple(p.__name__ for p in moto_patches.DEFECT_FIXES + moto_patches.SPEED_PATCHES)

    # When they are applied again (also the fixes alone)
    assert moto_patches.apply(speed=True) == first
    assert moto_patches.apply() == first

    # Then nothing was wrapped twice, and moto answers as before
    assert _moto_attributes() == patched
    with mock_aws():
        assert ledger_transcript(boto3.client("dynamodb")) == stock_transcript

    # And reverting puts back every attribute as stock moto had it
    moto_patches.revert()
    assert moto_patches.applied() == ()
    assert _moto_attributes() == stock


def test_the_speed_patches_go_on_top_of_fixes_applied_earlier(stock_transcript: list[Any]) -> None:
    # Given a process that applied the fixes only (as MotoServer's does)
    assert moto_patches.apply() == tuple(p.__name__ for p in moto_patches.DEFECT_FIXES)

    # When the speed patches follow, then the order is the same as applying both at once
    assert moto_patches.apply(speed=True) == tuple(
        p.__name__ for p in moto_patches.DEFECT_FIXES + moto_patches.SPEED_PATCHES
    )
    with mock_aws():
        ddb = boto3.client("dynamodb")
        assert ledger_transcript(ddb) == stock_transcript


def test_a_patch_that_fails_halfway_leaves_moto_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.dynamodb.models.table import Table as TableClass

    def breaks_halfway(replace: moto_patches.Replace) -> None:
        replace(TableClass, "query", lambda *args: None)
        raise RuntimeError("moto changed under this patch")

    monkeypatch.setattr(moto_patches, "SPEED_PATCHES", (breaks_halfway,))
    stock = _moto_attributes()
    fixes = moto_patches.apply()

    with pytest.raises(RuntimeError, match="moto changed"):
        moto_patches.apply(speed=True)

    assert moto_patches.applied() == fixes
    moto_patches.revert()
    assert _moto_attributes() == stock

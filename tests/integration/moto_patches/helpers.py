"""What the tests of sendonce_local.moto_patches share: in-process moto as stock, with the
defect fixes or with the speed patches too (``moto_as``); the ledger's calls as a transcript;
small tables, functions and streams to patch against; a call counter."""

from __future__ import annotations

import copy as copy_module
import cProfile
import io
import os
import pstats
import threading
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import boto3
import moto
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from sendonce_local import moto_patches

ROOT = Path(__file__).resolve().parents[3]
PROFILES = ("stock", "defects", "speed")
PATCHED = ("defects", "speed")


def _in_process_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fake credentials and no endpoint: mock_aws serves only AWS's own URLs.
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


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


def _filled_ledger(ddb: Any, items: int) -> None:
    _ledger_tables(ddb)
    for i in range(items):
        ddb.put_item(TableName="ledger", Item={**_key("c1", f"r{i:03}"), "state": _s("queued")})


def _group_claim(ddb: Any, recipients: Iterable[int]) -> dict[str, Any]:
    return _outcome(
        ddb.transact_write_items,
        TransactItems=[{"Update": {"TableName": "ledger", "Key": _key("c1", f"r{i:03}"), **CLAIM}} for i in recipients],
    )


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


def _streamed_table(ddb: Any, name: str = "streamed") -> str:
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    return str(ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"])


def _stream_records(arn: str) -> list[dict[str, Any]]:
    # From the backend: in-process moto answers the Streams API "not yet implemented" (the
    # server answers it; sendonce_local/stream_poller.py and tests/integration/test_counters.py).
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    backend = dynamodbstreams_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    shard = backend._get_table_from_arn(arn).stream_shard
    return shard.get(shard.starting_sequence_number, 1000)


def _calls(action: Callable[[], Any]) -> Counter[str]:
    """How often each function ran during ``action``: "moto/dynamodb/…/file.py:function"
    for moto's, "copy:deepcopy" for the copy module's, cProfile's own name for builtins."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        action()
    finally:
        profiler.disable()
    # Code objects carry the path moto was imported by; through a symlinked virtualenv (the
    # helpers' worktrees) that is not the resolved one.
    moto_roots = {str(Path(moto.__file__).parents[1]) + os.sep, str(Path(moto.__file__).resolve().parents[1]) + os.sep}
    calls: Counter[str] = Counter()
    for (filename, _line, function), (_primitive, total, *_rest) in pstats.Stats(profiler).stats.items():
        root = next((r for r in moto_roots if filename.startswith(r)), None)
        if root is not None:
            filename = filename[len(root) :]
        elif filename == copy_module.__file__:
            filename = "copy"
        calls[f"{filename}:{function}"] += total
    return calls


def _claim(ddb: Any, sk: str) -> dict[str, Any]:
    return _outcome(ddb.update_item, TableName="ledger", Key=_key("c1", sk), **CLAIM)

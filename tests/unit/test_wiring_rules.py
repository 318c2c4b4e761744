"""One way to wire (issue 34, item 3), read from the source:

- in lambdas/sendonce/wiring/, only clients.py builds a boto3 client: every other module
  takes its clients from a `Clients` (no boto3 import, no `session.client(...)`);
- every public function of wiring/ follows one naming rule: `build_<thing>(settings,
  clients, ...)` builds a thing, and `<thing>(settings)` is its twin cached with
  `lru_cache` in the same module; a few named exceptions (NOT_BUILDERS) say why;
- the API's wiring reads the API's settings only: wiring/api.py names no ConsumerSettings
  and reads no environment (an audit job gets sending settings from whoever has them);
- outside wiring/ (lambdas/, src/, bench/) nothing constructs a domain service or a
  DynamoDB adapter, but for the exceptions in BUILT_ELSEWHERE, each with its reason.

Each check is also shown catching a planted breach.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WIRING = ROOT / "lambdas" / "sendonce" / "wiring"
SCANNED = ("lambdas", "src", "bench")

# Public functions of wiring/ that build nothing, and why each stays there.
NOT_BUILDERS = {
    "clients": "clients.py: the default session's Clients, the one every cached builder uses",
    "configured_rates": "providers.py: the rates settings configure (the API's max_rate check, the CLI's view)",
    "configured_paces": "providers.py: the paces behind configured_rates, for the CLI's `sending` view",
}

# Domain services besides the `*Service` classes, by role.
OTHER_SERVICES = {"CounterAggregator", "CampaignAudit", "UnknownOutcomes", "SendingNow"}

# (file, class) -> why that file builds it itself.
BUILT_ELSEWHERE = {
    ("lambdas/sendonce/domain/campaigns/service.py", "CampaignService"): (
        "acting_as: the same service, with the same collaborators, recording another operator"
    ),
    ("lambdas/sendonce/domain/campaigns/service.py", "JobService"): (
        "a service given no jobs runs its own in process, over an in-memory job store"
    ),
    ("lambdas/sendonce/domain/campaigns/unknowns.py", "UnknownOutcomes"): (
        "unknowns_older_than: a read over the LedgerEvents port its caller gives"
    ),
    ("lambdas/sendonce/adapters/dynamodb/limiter_slots.py", "DynamoDBRateLimiter"): (
        "the slots' reader reads the rate in force as the limiter does, on its own client"
    ),
    ("src/sendonce_local/demo/baseline.py", "DynamoDBCampaignStore"): (
        "the demo's naive consumer (no ledger): what sendonce is compared with, not sendonce's wiring"
    ),
    ("src/sendonce_local/limiter_run.py", "DynamoDBRateLimiter"): (
        "the limiter itself under a virtual clock and sleep: the thing bench-limiter measures"
    ),
    ("bench/scale_stack.py", "DynamoDBCampaignStore"): "a status read measured on an unhooked session",
    ("bench/scale_stack.py", "DynamoDBLedger"): "a status read measured on an unhooked session",
    ("bench/scale_stack.py", "DynamoDBCounters"): "a status read measured on an unhooked session",
    ("bench/stack.py", "DynamoDBCampaignStore"): "the bench reads batch records and item sizes as stored",
    ("bench/status_bytes.py", "DynamoDBCampaignStore"): "a status read measured, and a campaign populated",
    ("bench/status_bytes.py", "DynamoDBLedger"): "a status read measured, and a campaign populated",
    ("bench/status_bytes.py", "DynamoDBCounters"): "a status read measured, and a campaign populated",
    ("bench/status_bytes.py", "CampaignService"): "populates a campaign without a queue: nothing is sent",
    ("bench/stream_replay.py", "DynamoDBCounters"): "the counters read back after the replay",
}


def _wiring_modules() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(WIRING.glob("*.py"))}


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


# --- the checks ---------------------------------------------------------------------------


def clients_built(source: str) -> Iterator[tuple[int, str]]:
    """Where a wiring module builds a client itself instead of taking it from a Clients."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] in {"boto3", "botocore"}:
                    yield node.lineno, f"imports {name}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr in {"client", "resource"} and not (isinstance(owner, ast.Name) and owner.id == "clients"):
                yield node.lineno, ast.unparse(node.func)


def _is_lru_cached(function: ast.FunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Name) and target.id == "lru_cache") or (
            isinstance(target, ast.Attribute) and target.attr == "lru_cache"
        ):
            return True
    return False


def misnamed(source: str, not_builders: dict[str, str] = NOT_BUILDERS) -> Iterator[tuple[int, str]]:
    """Public functions named outside the rule: `build_<thing>`, or `<thing>` cached with
    lru_cache beside its `build_<thing>`."""
    functions = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    names = {f.name for f in functions}
    for function in functions:
        name = function.name
        if name.startswith("_") or name.startswith("build_") or name in not_builders:
            continue
        if f"build_{name}" not in names:
            yield function.lineno, f"{name}: neither build_* nor the cached twin of a build_{name}"
        elif not _is_lru_cached(function):
            yield function.lineno, f"{name}: the twin of build_{name} is not lru_cache'd"


def reads_consumer_settings(source: str) -> Iterator[tuple[int, str]]:
    """Where a module names the consumer's settings or reads the environment."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in {"ConsumerSettings", "consumer_settings_model", "environ"}:
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute) and node.attr in {"ConsumerSettings", "environ"}:
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in {"ConsumerSettings", "consumer_settings_model", "environ"}:
                    yield node.lineno, f"imports {alias.name}"
        elif isinstance(node, ast.Import) and any(a.name == "os" for a in node.names):
            yield node.lineno, "imports os"


def _class_names(base: Path, keep) -> set[str]:
    found = set()
    for path in base.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and keep(node.name):
                found.add(node.name)
    return found


def built_classes() -> set[str]:
    """The domain's services and the DynamoDB adapters: what only wiring/ builds."""
    services = _class_names(ROOT / "lambdas" / "sendonce" / "domain", lambda n: n.endswith("Service"))
    adapters = _class_names(ROOT / "lambdas" / "sendonce" / "adapters" / "dynamodb", lambda n: n.startswith("DynamoDB"))
    return services | OTHER_SERVICES | adapters


def constructions(source: str, classes: set[str]) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _called(node) in classes:
            yield node.lineno, str(_called(node))


def _outside_wiring() -> Iterator[Path]:
    for base in SCANNED:
        for path in sorted((ROOT / base).rglob("*.py")):
            if not path.is_relative_to(WIRING):
                yield path


def built_outside_wiring() -> tuple[list[str], set[tuple[str, str]]]:
    """(breaches, the BUILT_ELSEWHERE entries met)."""
    classes, found, met = built_classes(), [], set()
    for path in _outside_wiring():
        relative = path.relative_to(ROOT).as_posix()
        for line, name in constructions(path.read_text(), classes):
            if (relative, name) in BUILT_ELSEWHERE:
                met.add((relative, name))
            else:
                found.append(f"{relative}:{line}: builds {name} (build it in sendonce/wiring/)")
    return found, met


# --- the rules hold -----------------------------------------------------------------------


def test_the_wiring_is_a_package_of_modules_each_found():
    modules = _wiring_modules()
    assert {"clients.py", "stores.py", "consumer.py", "api.py", "jobs.py", "events.py"} <= set(modules)
    assert {"unsubscribe.py", "aggregator.py", "operator.py"} <= set(modules)
    assert not (ROOT / "lambdas" / "sendonce" / "wiring.py").exists()


def test_only_clients_py_builds_a_client():
    found = [
        f"wiring/{name}:{line}: {what}"
        for name, source in _wiring_modules().items()
        if name != "clients.py"
        for line, what in clients_built(source)
    ]
    assert found == [], "take clients from `Clients` (wiring/clients.py):\n" + "\n".join(found)
    assert list(clients_built(_wiring_modules()["clients.py"])), "clients.py builds none: the check reads nothing"


def test_every_public_wiring_function_follows_the_naming_rule():
    found = [
        f"wiring/{name}:{line}: {what}" for name, source in _wiring_modules().items() for line, what in misnamed(source)
    ]
    assert found == []
    defined = {
        n.name
        for source in _wiring_modules().values()
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef)
    }
    assert set(NOT_BUILDERS) <= defined, f"excused but gone: {sorted(set(NOT_BUILDERS) - defined)}"


def test_the_api_wiring_reads_no_consumer_settings():
    assert list(reads_consumer_settings(_wiring_modules()["api.py"])) == []


def test_nothing_outside_the_wiring_builds_a_service_or_a_dynamodb_adapter():
    found, met = built_outside_wiring()
    assert found == []
    assert set(BUILT_ELSEWHERE) == met, f"excused but no longer built there: {sorted(set(BUILT_ELSEWHERE) - met)}"
    assert {"DeliveryService", "CampaignService", "CounterAggregator", "DynamoDBLedger"} <= built_classes()


# --- each check catches a planted breach --------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import boto3\ndef build_x(settings, clients):\n    return X(client=boto3.client('sqs'))",
        "def build_x(settings, session):\n    return X(client=session.client('dynamodb'))",
        "from botocore.config import Config\nCONFIG = Config(retries={'max_attempts': 6})",
        "def build_x(settings, clients):\n    return X(client=clients.session.client('s3'))",
    ],
)
def test_the_client_check_catches_a_client_built_in_a_wiring_module(source):
    assert list(clients_built(source))


def test_the_client_check_passes_clients_from_clients():
    source = "def build_x(settings, clients):\n    return X(client=clients.dynamodb, sesv2=clients.client('sesv2'))"
    assert list(clients_built(source)) == []


@pytest.mark.parametrize(
    "source",
    [
        "def assemble_consumer(settings, parts):\n    pass",
        "def ledger_events_of(dynamodb, table):\n    pass",
        "def scheduler_for(settings, session):\n    pass",
        "def consumer_parts(settings, session=None):\n    pass",
        # a twin that is not cached
        "def thing(settings):\n    return build_thing(settings, clients())\ndef build_thing(settings, clients):\n    pass",
    ],
)
def test_the_naming_check_catches_a_builder_named_outside_the_rule(source):
    assert list(misnamed(source, {}))


def test_the_naming_check_passes_a_builder_and_its_cached_twin():
    source = (
        "@lru_cache(maxsize=4)\ndef thing(settings):\n    return build_thing(settings, clients())\n"
        "def build_thing(settings, clients):\n    pass\ndef _helper():\n    pass"
    )
    assert list(misnamed(source, {})) == []


@pytest.mark.parametrize(
    "source",
    [
        "from sendonce.settings import ApiSettings, ConsumerSettings",
        "def build_x(settings, clients):\n    return ConsumerSettings.from_env(environ)",
        "import os\ndef build_x(settings, clients):\n    return settings_from(os.environ)",
        "from sendonce import settings\ndef build_x(clients):\n    return settings.ConsumerSettings()",
    ],
)
def test_the_settings_check_catches_the_api_reading_the_consumers_settings(source):
    assert list(reads_consumer_settings(source))


@pytest.mark.parametrize(
    "source",
    [
        "service = DeliveryService(ledger=ledger)",
        "store = DynamoDBCampaignStore(client=dynamodb, table_name=table)",
        "from sendonce.domain.campaigns import counters\naggregator = counters.CounterAggregator(counters=c)",
    ],
)
def test_the_construction_check_catches_a_service_built_outside_the_wiring(source):
    assert list(constructions(source, built_classes()))


def test_the_construction_check_passes_a_call_of_a_builder():
    source = "from sendonce.wiring.stores import build_campaign_store\ncampaigns, _ = build_campaign_store(t, c)"
    assert list(constructions(source, built_classes())) == []

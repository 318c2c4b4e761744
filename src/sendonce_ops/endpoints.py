"""Where a deployed sendonce lives: the stack's outputs, or SENDONCE_* variables.

Each value comes from its environment variable when set, else from the CloudFormation
stack's output of the same meaning (the names infra/sendonce_infra/stack.py gives them). The stack is
read only when some value is missing from the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import ClientError
from pydantic import ValidationError

from sendonce.adapters.providers.descriptor import Pace
from sendonce.contract import ENV_PREFIX, Output, env_name
from sendonce.domain.errors import SettingsError
from sendonce.settings import ApiSettings, ConsumerSettings
from sendonce.wiring.providers import configured_paces, configured_rates

V = TypeVar("V")

DEFAULT_STACK = "Sendonce"

# field -> (environment variable, stack output)
SOURCES = {
    field: (env_name(field), output)
    for field, output in (
        ("queue_url", Output.QUEUE_URL),
        ("dead_letter_queue_url", Output.DEAD_LETTER_QUEUE_URL),
        ("ledger_table", Output.LEDGER_TABLE_NAME),
        ("campaigns_table", Output.CAMPAIGNS_TABLE_NAME),
    )
}
OPTIONAL = {
    field: (env_name(field), output)
    for field, output in (
        ("queue_arn", Output.QUEUE_ARN),
        ("dead_letter_queue_arn", Output.DEAD_LETTER_QUEUE_ARN),
        ("scheduler_group", Output.SCHEDULE_GROUP_NAME),
        ("scheduler_role_arn", Output.SCHEDULER_ROLE_ARN),
        ("scheduled_start_function_arn", Output.SCHEDULED_START_FUNCTION_ARN),
        ("suppressions_table", Output.SUPPRESSIONS_TABLE_NAME),
    )
}


class EndpointsError(Exception):
    """The deployment cannot be found or is incomplete; the message says what to do."""


@dataclass(frozen=True)
class Endpoints:
    queue_url: str
    dead_letter_queue_url: str
    ledger_table: str
    campaigns_table: str
    queue_arn: str | None = None
    dead_letter_queue_arn: str | None = None
    scheduler_group: str | None = None
    scheduler_role_arn: str | None = None
    scheduled_start_function_arn: str | None = None
    suppressions_table: str | None = None  # what the operator service's forecasts read
    stack: str | None = None  # the stack read, if any
    # Campaigns created through this CLI are counted from their creation (ApiSettings.counters):
    # where the stack was read (it runs the counters' aggregator), or SENDONCE_COUNTERS says so.
    counters: bool = False

    def api_settings(self) -> ApiSettings:
        try:
            return ApiSettings(
                ledger_table=self.ledger_table,
                campaigns_table=self.campaigns_table,
                queue_url=self.queue_url,
                dead_letter_queue_url=self.dead_letter_queue_url,
                counters=self.counters,
                scheduler_group=self.scheduler_group,
                scheduler_role_arn=self.scheduler_role_arn,
                scheduled_start_function_arn=self.scheduled_start_function_arn,
                suppressions_table=self.suppressions_table,
            )
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise EndpointsError(f"invalid sendonce endpoints: {problems}") from None


def sending_settings(session: Any, endpoints: Endpoints, environ: Mapping[str, str]) -> ConsumerSettings:
    """The consumer's settings, for what must send or render exactly as it does (preview,
    test sends): the consumer function's environment when a stack was read (its provider
    secrets' names, rates, suppression table, unsubscribe link), then SENDONCE_* variables
    over it, then the endpoints. Only names of secrets are read here, never a secret."""
    values: dict[str, str] = {}
    if endpoints.stack is not None:
        function = stack_outputs(session, endpoints.stack).get(Output.CONSUMER_FUNCTION_NAME)
        if function:
            configuration = session.client("lambda").get_function_configuration(FunctionName=function)
            values.update((configuration.get("Environment") or {}).get("Variables") or {})
    # SENDONCE_* and the variables a provider's settings also read (its registration says which).
    also_read = set(ConsumerSettings.env_fallbacks.values())
    values.update({k: v for k, v in environ.items() if k.startswith(ENV_PREFIX) or k in also_read})
    values.update(
        {
            env_name("ledger_table"): endpoints.ledger_table,
            env_name("campaigns_table"): endpoints.campaigns_table,
            env_name("dead_letter_queue_url"): endpoints.dead_letter_queue_url,
        }
    )
    try:
        return ConsumerSettings.from_env(values)
    except SettingsError as exc:
        raise EndpointsError(f"cannot send or render as the consumer does: {exc}") from None


class _FromConsumer(Mapping[str, V]):
    """A value per provider from the consumer function's settings, read when first looked up:
    so no command that never looks one up reads them (nor needs lambda:GetFunctionConfiguration)."""

    READ: Callable[[ConsumerSettings], dict[str, V]]
    FAILS: str  # what cannot be known when they cannot be read

    def __init__(self, session: Any, endpoints: Endpoints, environ: Mapping[str, str]):
        self._where = (session, endpoints, environ)
        self._values: dict[str, V] | None = None

    def _loaded(self) -> dict[str, V]:
        if self._values is None:
            try:
                self._values = type(self).READ(sending_settings(*self._where))
            except EndpointsError as exc:
                raise EndpointsError(f"{self.FAILS} ({exc})") from None
        return self._values

    def __getitem__(self, provider: str) -> V:
        return self._loaded()[provider]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


class ConsumerRates(_FromConsumer[float]):
    """Each provider's rate as the consumer paces it: only creating a campaign with a max_rate
    looks one up."""

    READ = staticmethod(configured_rates)
    FAILS = "max_rate: cannot read the rate the consumer paces each provider at"


class ConsumerPaces(_FromConsumer[Pace]):
    """Each provider's pace (rate and reserve): only a view that finds a campaign sending now
    asks for the rate in force."""

    READ = staticmethod(configured_paces)
    FAILS = "the rate in force: cannot read how the consumer paces each provider"


def resolve_endpoints(session: Any, stack: str, environ: Mapping[str, str]) -> Endpoints:
    values = {field: environ.get(env) or None for field, (env, _) in {**SOURCES, **OPTIONAL}.items()}
    read_stack = None
    if any(values[field] is None for field in SOURCES):
        outputs = stack_outputs(session, stack)
        read_stack = stack
        for field, (_, output) in {**SOURCES, **OPTIONAL}.items():
            values[field] = values[field] or outputs.get(output)
        missing = [SOURCES[f][1] for f in SOURCES if not values[f]]
        if missing:
            raise EndpointsError(
                f"stack {stack!r} has no output(s) {', '.join(missing)}: is it a sendonce stack? "
                "(or set the SENDONCE_* variables)"
            )
    counters = environ.get(env_name("counters"), "").lower() in {"1", "true", "yes", "on"} or read_stack is not None
    return Endpoints(**values, stack=read_stack, counters=counters)


def stack_outputs(session: Any, stack: str) -> dict[str, str]:
    region = session.region_name
    try:
        described = session.client("cloudformation").describe_stacks(StackName=stack)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") == "ValidationError" and "does not exist" in error.get("Message", ""):
            raise EndpointsError(
                f"stack {stack!r} not found in region {region} "
                "(deploy it with `cdk deploy` or set SENDONCE_* variables)"
            ) from None
        raise
    outputs = described["Stacks"][0].get("Outputs", [])
    return {o["OutputKey"]: o["OutputValue"] for o in outputs}


def queue_arn(sqs: Any, queue_url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

"""Amazon SES v2 as sendonce registers it: capabilities, settings, adapter, events."""

from __future__ import annotations

from pydantic import Field

from sendonce.adapters.providers.descriptor import BusEvents, Pace, Provider, ProviderEnv, ProviderSettings
from sendonce.adapters.providers.ses.account import SesAccount
from sendonce.adapters.providers.ses.events import parse_ses_event
from sendonce.adapters.providers.ses.prices import BILLING
from sendonce.adapters.providers.ses.sender import CAPABILITIES, SEND_CLIENT_CONFIG, SesProvider
from sendonce.domain.sending.ports import EmailProvider

NAME = "ses"
# What SES publishes to EventBridge: the rule (sendonce_cdk.providers) matches this source.
EVENT_SOURCE = "aws.ses"


class SesRateSettings(ProviderSettings):
    # Recipients per second for the shared rate (capped further by the account's
    # MaxSendRate when GetAccount answers).
    send_rate: float = Field(default=CAPABILITIES.default_rate, gt=0, le=100_000)


class SesSettings(SesRateSettings):
    # The configuration set every send names, so that its events reach the events function.
    configuration_set: str | None = None
    # The one a campaign that tracks opens or clicks names: the same events, and opens and clicks.
    tracked_configuration_set: str | None = None


def _build(settings: SesSettings, env: ProviderEnv) -> EmailProvider:
    return SesProvider(
        client=env.clients.client("sesv2", SEND_CLIENT_CONFIG),
        configuration_set=settings.configuration_set,
        tracked_configuration_set=settings.tracked_configuration_set,
    )


def _account(env: ProviderEnv) -> SesAccount:
    # One attempt, short timeouts: a failed read fails that check; the next one reads again.
    return SesAccount(client=env.clients.client("sesv2", SEND_CLIENT_CONFIG))


def _pace(settings: SesSettings, provider: EmailProvider | None) -> Pace:
    rate = settings.send_rate
    account_rate = provider.max_send_rate() if isinstance(provider, SesProvider) else None
    return Pace(rate=min(rate, account_rate) if account_rate else rate)


PROVIDER = Provider(
    name=NAME,
    label="SES",
    capabilities=CAPABILITIES,
    settings=SesSettings,
    rate_settings=SesRateSettings,
    build=_build,
    pace=_pace,
    bus_events=BusEvents(provider=NAME, source=EVENT_SOURCE, parse=parse_ses_event),
    account=_account,
    billing=BILLING,
)

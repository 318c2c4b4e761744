"""Preview and test sends, built from the consumer's own parts (its settings: providers,
shared send rate, suppression list, unsubscribe links), so they show and send exactly what
the consumer would. The operator API builds them when a request first needs them, the CLI
from the consumer's settings it reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from sendonce.adapters.providers.descriptor import Provider
from sendonce.domain.campaigns.preview import PreviewService, TestSendService
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.consumer import build_consumer_parts
from sendonce.wiring.stores import build_test_send_log


@dataclass(frozen=True)
class OperatorSending:
    preview: PreviewService
    test_sends: TestSendService


def build_operator_sending(
    settings: ConsumerSettings, clients: Clients, *, providers: Mapping[str, Provider] | None = None
) -> OperatorSending:
    parts = build_consumer_parts(settings, clients, providers=providers)
    return OperatorSending(
        preview=PreviewService(
            campaigns=parts.campaigns, unsubscribe=parts.unsubscribe, feedback_id=settings.feedback_id
        ),
        test_sends=TestSendService(
            campaigns=parts.campaigns,
            providers=parts.providers,
            log=build_test_send_log(settings.campaigns_table, clients.dynamodb),
            limiter=parts.limiter,
            suppressions=parts.suppressions,
            unsubscribe=parts.unsubscribe,
            feedback_id=settings.feedback_id,
        ),
    )


@lru_cache(maxsize=4)
def operator_sending(settings: ConsumerSettings) -> OperatorSending:
    """Built once per Lambda execution environment for these settings (the operator API)."""
    return build_operator_sending(settings, clients())

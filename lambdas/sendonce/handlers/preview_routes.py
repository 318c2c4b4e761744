"""The operator API's preview and test-send routes (docs/api.md), registered on the API's
resolver by `register`. Thin: parse, call PreviewService / TestSendService, answer.

The services are the consumer's own parts (wiring/preview.py), built from the
function's SENDONCE_* settings on the first request that needs them.
"""

# No `from __future__ import annotations`: Powertools reads these annotations at runtime.

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from sendonce import contract
from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import ADDRESS_PATTERN
from sendonce.domain.campaigns.preview import Preview, recipient_of
from sendonce.domain.campaigns.recipients_file import InlineRecipient, VariableName
from sendonce.domain.campaigns.variants import VARIANT_ID_PATTERN
from sendonce.domain.errors import InvalidCampaignError, SettingsError
from sendonce.domain.models import ID_PATTERN, TestSendRecord, VariableValue
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import clients
from sendonce.wiring.preview import OperatorSending, operator_sending
from sendonce.wiring.stores import build_test_send_log

CampaignId = Annotated[str, Path(pattern=ID_PATTERN, description="The campaign id.")]
Variables = Annotated[
    dict[VariableName, VariableValue],
    Field(max_length=limits.VARIABLES_PER_RECIPIENT, description="Template variables (scalars)."),
]
VariantField = Annotated[str | None, Field(pattern=VARIANT_ID_PATTERN)]


class PreviewBody(BaseModel):
    """At most one of `variables` or `recipient`; neither previews with no variables."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {"required": ["variables", "recipient"]}})

    variables: Variables = Field(default=None)
    recipient: InlineRecipient = Field(default=None, description="A recipient as publish takes it.")
    variant: VariantField = Field(
        default=None,
        description="An A/B campaign's variant to show; absent: the recipient's own (its test variant, or the "
        "winner; one of the rest before the pick is shown the first).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "PreviewBody":
        if self.variables is not None and self.recipient is not None:
            raise ValueError("give variables or recipient, not both")
        return self


class PreviewView(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    campaign_id: str
    recipient_id: str
    ok: bool = Field(description="False: the templates fail for these variables (`error` says why); nothing is sent.")
    error: str | None = None
    missing: list[str] = Field(description="Variables the templates use that were not given.")
    unused: list[str] = Field(description="Variables given that no template uses.")
    provider: str
    sender: str = Field(alias="from")
    reply_to: str | None = None
    subject: str | None = None
    headers: dict[str, str] = Field(
        description="List-Unsubscribe and List-Unsubscribe-Post, as the consumer adds them."
    )
    unsubscribe_configured: bool
    html: str | None = None
    text: str | None = None
    variant: str | None = Field(default=None, description="An A/B campaign's variant shown; null: no A/B test.")
    awaits_winner: bool = Field(
        default=False,
        description="true: the recipient is one of the rest and no winner is recorded yet; the first variant is shown.",
    )

    @classmethod
    def of(cls, preview: Preview) -> "PreviewView":
        return cls.model_validate(preview.as_dict())


class TestSendBody(BaseModel):
    __test__ = False
    model_config = ConfigDict(extra="forbid")

    to: list[Annotated[str, Field(min_length=3, max_length=limits.ADDRESS_CHARS, pattern=ADDRESS_PATTERN)]] = Field(
        min_length=1, max_length=limits.TEST_SEND_ADDRESSES, description="The addresses to send the test to."
    )
    variables: Variables = Field(default_factory=dict)
    include_suppressed: StrictBool = Field(
        default=False, description="Send to suppressed addresses too; else refused (409)."
    )
    variant: VariantField = Field(
        default=None, description="An A/B campaign's variant to send; absent: each of its variants, to every address."
    )


class TestSendOutcomeView(BaseModel):
    __test__ = False

    email_fingerprint: str
    provider_message_id: str | None = None
    error: str | None = None
    suppressed: str | None = None
    variant: str | None = Field(default=None, description="An A/B campaign's variant this email was.")


class TestSendView(BaseModel):
    __test__ = False

    test_send_id: str
    campaign_id: str
    at: str
    by: str
    provider: str
    subject: str = Field(description="As sent, with its [TEST] prefix.")
    include_suppressed: bool
    sent: int
    outcomes: list[TestSendOutcomeView] = Field(description="Per address, by fingerprint (never the address).")

    @classmethod
    def of(cls, record: TestSendRecord) -> "TestSendView":
        return cls(**record.model_dump(), sent=record.sent)


class TestSendsView(BaseModel):
    __test__ = False

    count: int = Field(description="Test sends of this campaign in all.")
    recent: list[TestSendView] = Field(description=f"The latest {limits.TEST_SENDS_SHOWN}, newest first.")


class TestSendsUnavailableError(InvalidCampaignError):
    """This function was not given the consumer's sending settings."""

    __test__ = False


class SendingOnDemand:
    """The preview and test-send services, built from the consumer's settings (`settings`, read
    when a request first needs them), and the record of test sends, read from the campaigns
    table the operator service uses: a status read needs nothing of the consumer's."""

    def __init__(
        self,
        settings: Callable[[], ConsumerSettings],
        *,
        campaigns_table: str,
        build: Callable[[ConsumerSettings], OperatorSending] = operator_sending,
    ):
        self._settings = settings
        self._campaigns_table = campaigns_table
        self._build = build

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "SendingOnDemand":
        """A function's own: its SENDONCE_* variables (the consumer's, by field)."""
        return cls(
            lambda: ConsumerSettings.from_env(environ),
            campaigns_table=environ.get(contract.env_name("campaigns_table"), ""),
        )

    def _consumer_settings(self) -> ConsumerSettings:
        try:
            return self._settings()
        except SettingsError as exc:
            raise TestSendsUnavailableError(
                f"preview and test sends are not configured on this API function ({exc}); "
                "`sendonce campaign preview` and `test-send` use the consumer's settings"
            ) from None

    @property
    def preview(self) -> Any:
        return self._build(self._consumer_settings()).preview

    @property
    def test_sends(self) -> Any:
        settings = self._consumer_settings()
        if not settings.suppressions_table:
            # Not the consumer's settings: sending from here would skip the suppression list.
            raise TestSendsUnavailableError(
                "test sends are not configured on this API function (it has no suppression list to check the "
                "addresses against); `sendonce campaign test-send` sends them with the consumer's settings"
            )
        return self._build(settings).test_sends

    def recent(self, campaign_id: str) -> tuple[list[TestSendRecord], int]:
        return build_test_send_log(self._campaigns_table, clients().dynamodb).recent(
            campaign_id, limit=limits.TEST_SENDS_SHOWN
        )


def view_of_test_sends(sending: Any, campaign_id: str) -> TestSendsView:
    records, count = sending.recent(campaign_id)
    return TestSendsView(count=count, recent=[TestSendView.of(r) for r in records])


def register(
    app: APIGatewayHttpResolver, *, responses: Callable[..., dict[int, Any]], caller: Callable[[], str]
) -> None:
    """Add the routes to `app`; `responses` documents them as the API's other routes are."""

    @app.post(
        "/campaigns/<campaign_id>/preview",
        responses=responses(200, "The email as the consumer renders it; nothing is sent", PreviewView, 400, 404, 409),
    )
    def preview(campaign_id: CampaignId, body: Annotated[PreviewBody | None, Body()] = None) -> PreviewView:
        if body is not None and body.recipient is not None:
            recipient = body.recipient
        else:
            recipient = recipient_of(body.variables if body is not None and body.variables else {})
        variant = body.variant if body is not None else None
        return PreviewView.of(app.context["sending"].preview.preview(campaign_id, recipient, variant=variant))

    @app.post(
        "/campaigns/<campaign_id>/test-sends",
        responses=responses(
            200,
            "Sent as a test (per address: sent or why not); the campaign is unchanged",
            TestSendView,
            400,
            404,
            409,
        ),
    )
    def test_send(campaign_id: CampaignId, body: Annotated[TestSendBody, Body()]) -> TestSendView:
        record = app.context["sending"].test_sends.send(
            campaign_id,
            body.to,
            variables=body.variables,
            by=caller(),
            include_suppressed=body.include_suppressed,
            variant=body.variant,
        )
        return TestSendView.of(record)

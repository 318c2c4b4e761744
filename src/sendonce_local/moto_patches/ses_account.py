"""SES v2's account has a state: GetAccount answers it, sends obey it (a feature gap).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_ses_account.py.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

from sendonce_local.moto_patches.replacing import Replace

ENFORCEMENT_STATUSES = ("HEALTHY", "PROBATION", "SHUTDOWN")

# Where the state lives on each SES v2 backend (one per account and region): moto's reset
# empties a backend's attributes, this one with them.
_STATE_ATTRIBUTE = "_sendonce_account_state"
# moto's threaded server answers requests concurrently: reads and writes of the state take it.
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class AccountState:
    """What GetAccount answers for one account in one region (besides the sent count)."""

    sending_enabled: bool = True
    enforcement_status: str = "HEALTHY"
    # Local defaults, not AWS's: sendonce's consumer caps its SES rate at MaxSendRate.
    max_send_rate: float = 100000.0
    max_24_hour_send: float = -1.0


def account_state(backend: Any) -> AccountState:
    """The state of the SES v2 backend's account (the defaults until something set it)."""
    with _lock:
        state: AccountState = vars(backend).setdefault(_STATE_ATTRIBUTE, AccountState())
        return state


def ses_account_has_a_state(replace: Replace) -> None:
    """moto's SES v2 has no ``GetAccount`` and no ``PutAccountSendingAttributes``.

    sendonce reads GetAccount twice: the account health check pauses the SES campaigns that
    are sending when ``SendingEnabled`` is false or ``EnforcementStatus`` is SHUTDOWN (and
    alarms on PROBATION), and the consumer caps its SES send rate at ``SendQuota.MaxSendRate``. moto 5.2.5 has neither action (in process,
    boto3's call raises ``NotImplementedError``; the server, which has no route for their
    paths, answers HTTP 404), and its sends never refuse for the account's sake, so neither
    path could run locally.

    The patch gives each SES v2 backend (one per account and region; moto's reset clears it)
    an account state, adds both actions to ``SESV2Response`` and their paths to
    ``moto.sesv2.urls.url_paths`` (the server's routes):

    - ``get_account`` answers ``DedicatedIpAutoWarmupEnabled`` false,
      ``ProductionAccessEnabled`` true, ``SendingEnabled``, ``EnforcementStatus`` and
      ``SendQuota`` (``MaxSendRate``, ``Max24HourSend``, and ``SentLast24Hours``: the SES v1
      backend's count of recipients sent to, ever). Defaults: sending enabled, HEALTHY,
      ``MaxSendRate`` 100000.0 and ``Max24HourSend`` -1.0 (unlimited): AWS's sandbox quota
      (1/s) would make the consumer, which sends no faster than ``MaxSendRate``, crawl.
    - ``put_account_sending_attributes`` sets ``SendingEnabled``. Its body may also carry
      fields the real API lacks, for local tests: ``EnforcementStatus`` (HEALTHY, PROBATION,
      SHUTDOWN), ``MaxSendRate`` and ``Max24HourSend`` (numbers). boto3 refuses unknown
      parameters: ``sendonce_local.moto_server.set_ses_account`` adds them to the request.
      An invalid value is a ``BadRequestException`` naming it, and changes nothing.

    It also wraps ``SESV2Response.send_email`` (whatever it holds then: the headers patch's
    wrapper): with EnforcementStatus SHUTDOWN a send is refused with
    ``AccountSuspendedException``, with sending disabled with ``SendingPausedException``
    (both HTTP 400, as the sesv2 model says), before moto's send, so nothing is recorded.
    PROBATION sends as HEALTHY does. SES v1's ``SendEmail`` is not checked.
    """
    import moto.sesv2.urls as sesv2_urls
    from moto.core.exceptions import ServiceException
    from moto.sesv2.responses import SESV2Response

    # The codes are shapes of the sesv2 model, so moto's serializer renders each as the model
    # says (HTTP 400; the code as the error type boto3 reads). Classes of this module, not of
    # moto's packages: moto then looks a code up in the called service's model only.
    class SendingPausedException(ServiceException):
        code = "SendingPausedException"

    class AccountSuspendedException(ServiceException):
        code = "AccountSuspendedException"

    class BadRequestException(ServiceException):
        code = "BadRequestException"

    stock_send = vars(SESV2Response)["send_email"]

    def get_account(self: Any) -> str:
        backend = self.sesv2_backend
        state = account_state(backend)
        return json.dumps(
            {
                "DedicatedIpAutoWarmupEnabled": False,
                "EnforcementStatus": state.enforcement_status,
                "ProductionAccessEnabled": True,
                "SendingEnabled": state.sending_enabled,
                "SendQuota": {
                    "Max24HourSend": state.max_24_hour_send,
                    "MaxSendRate": state.max_send_rate,
                    "SentLast24Hours": float(backend.core_backend.sent_message_count),
                },
            }
        )

    def put_account_sending_attributes(self: Any) -> str:
        try:
            changes = _changes(json.loads(self.body or "{}"))
        except ValueError as invalid:
            raise BadRequestException(str(invalid)) from None
        backend = self.sesv2_backend
        with _lock:
            state = vars(backend).get(_STATE_ATTRIBUTE) or AccountState()
            vars(backend)[_STATE_ATTRIBUTE] = dataclasses.replace(state, **changes)
        return "{}"

    def send_email(self: Any) -> str:
        state = account_state(self.sesv2_backend)
        if state.enforcement_status == "SHUTDOWN":
            raise AccountSuspendedException("The account has been suspended (EnforcementStatus SHUTDOWN)")
        if not state.sending_enabled:
            raise SendingPausedException("Sending is paused for this account")
        answer: str = stock_send(self)
        return answer

    get_account.__doc__ = "SES v2 GetAccount: the account's state (sendonce_local.moto_patches.ses_account)."
    put_account_sending_attributes.__doc__ = (
        "SES v2 PutAccountSendingAttributes, plus local-only fields (sendonce_local.moto_patches.ses_account)."
    )
    send_email.__doc__ = stock_send.__doc__
    # moto's server routes by Flask rules made from these patterns, and its catch-all
    # "/v2/.*" is no rule there: each action needs a pattern of its own.
    account_paths = {
        "{0}/v2/email/account$": SESV2Response.dispatch,
        "{0}/v2/email/account/sending$": SESV2Response.dispatch,
    }
    replace(sesv2_urls, "url_paths", {**sesv2_urls.url_paths, **account_paths})
    replace(SESV2Response, "get_account", get_account)
    replace(SESV2Response, "put_account_sending_attributes", put_account_sending_attributes)
    replace(SESV2Response, "send_email", send_email)


def _changes(body: Any) -> dict[str, Any]:
    """The state fields a PutAccountSendingAttributes body sets, all checked before any is set
    (``ValueError`` naming the first invalid one)."""
    if not isinstance(body, dict):
        raise ValueError(f"the request body must be a JSON object, not {body!r}")
    changes: dict[str, Any] = {}
    if body.get("SendingEnabled") is not None:
        if not isinstance(body["SendingEnabled"], bool):
            raise ValueError(f"SendingEnabled must be true or false, not {body['SendingEnabled']!r}")
        changes["sending_enabled"] = body["SendingEnabled"]
    if body.get("EnforcementStatus") is not None:
        status = body["EnforcementStatus"]
        if status not in ENFORCEMENT_STATUSES:
            raise ValueError(
                f"EnforcementStatus {status!r} is not one of {', '.join(ENFORCEMENT_STATUSES)} "
                "(a local-only field of sendonce's moto)"
            )
        changes["enforcement_status"] = status
    for field, attribute in (("MaxSendRate", "max_send_rate"), ("Max24HourSend", "max_24_hour_send")):
        if body.get(field) is not None:
            value = body[field]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{field} must be a number, not {value!r} (a local-only field)")
            changes[attribute] = float(value)
    return changes

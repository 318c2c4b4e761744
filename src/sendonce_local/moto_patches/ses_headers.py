"""SES v2's simple sends keep the headers they were given (a feature gap).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_ses_headers.py.
"""

from __future__ import annotations

import json
from typing import Any

from sendonce_local.moto_patches.replacing import Replace


def simple_sends_keep_their_headers(replace: Replace) -> None:
    """moto's SES v2 ``SendEmail`` drops ``Content.Simple.Headers``.

    SES adds them to the email it sends (List-Unsubscribe, Feedback-ID: what the consumer
    composes). moto 5.2.5 hands a simple send to its SES v1 backend with the subject and one
    body only, so the ``Message`` it records, which ``/moto-api/data.json`` shows, has no
    trace of them, and nothing can check locally what SES was asked to send.

    The patch wraps ``SESV2Response.send_email``: after the stock send, the recorded
    ``Message`` gains ``headers``, the request's list of ``{"Name", "Value"}`` as given
    (empty when none were). Raw sends carry their headers in ``raw_data`` already; nothing
    else about a send changes, refusals included.
    """
    from moto.sesv2.responses import SESV2Response

    stock = vars(SESV2Response)["send_email"]

    def send_email(self: Any) -> str:
        answer: str = stock(self)
        simple = (json.loads(self.body).get("Content") or {}).get("Simple")
        if simple is not None:
            message_id = json.loads(answer)["MessageId"]
            headers = [{"Name": h["Name"], "Value": h["Value"]} for h in simple.get("Headers") or []]
            for message in reversed(self.sesv2_backend.core_backend.sent_messages):
                if message.id == message_id:
                    message.headers = headers
                    break
        return answer

    send_email.__doc__ = stock.__doc__
    replace(SESV2Response, "send_email", send_email)

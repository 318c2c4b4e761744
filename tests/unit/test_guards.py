"""The guard's content hash is the one Powertools stored for the same configuration, so that
claims recorded before issue 34 (when the guard ran through Powertools' idempotency utility)
still match their content: a different hash would answer every replay of an old delivery as
a conflict. Checked against Powertools' own hashing, which is a private method: this test is
the version guard (it fails if a Powertools upgrade changes what was stored)."""

from __future__ import annotations

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from hypothesis import given
from hypothesis import strategies as st

from sendonce.domain.sending.guards import payload_hash


class _Powertools(BasePersistenceLayer):  # the four storage hooks are never called here
    def _get_record(self, idempotency_key):  # pragma: no cover
        raise NotImplementedError

    def _put_record(self, data_record):  # pragma: no cover
        raise NotImplementedError

    def _update_record(self, data_record):  # pragma: no cover
        raise NotImplementedError

    def _delete_record(self, data_record):  # pragma: no cover
        raise NotImplementedError


def _powertools_hash(email: str, variables: dict) -> str:
    layer = _Powertools()
    config = IdempotencyConfig(
        event_key_jmespath="[campaign_id, recipient_id]", payload_validation_jmespath="[email, variables]"
    )
    layer.configure(config, key_prefix="sendonce")
    return layer._get_hashed_payload({"email": email, "variables": variables})


_text = st.text(max_size=20)
_values = st.one_of(_text, st.integers(), st.booleans(), st.none(), st.lists(_text, max_size=3))


@given(email=st.emails(), variables=st.dictionaries(_text, _values, max_size=5))
def test_the_content_hash_is_the_one_powertools_stored(email, variables):
    assert payload_hash(email, variables) == _powertools_hash(email, variables)


def test_the_hash_tells_content_apart():
    assert payload_hash("a@example.com", {"name": "A"}) != payload_hash("a@example.com", {"name": "B"})
    assert payload_hash("a@example.com", {"x": "1", "y": "2"}) == payload_hash("a@example.com", {"y": "2", "x": "1"})

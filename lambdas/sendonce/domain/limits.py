"""Every size sendonce accepts from an operator, in one place. docs/limits.md gives the reason
for each number; the validators in campaigns/spec.py, campaigns/recipients_file.py
and the queue adapter read them here.

Sizes of stored or sent text are UTF-8 bytes, because the limits downstream are in bytes.
"""

from __future__ import annotations

from sendonce.domain.models import MAX_RECIPIENTS_PER_BATCH

# --- downstream hard limits these are derived from ---------------------------------------
# Queues created by CloudFormation keep SQS's old default MaximumMessageSize of 256 KiB
# unless they set it (ours does not); the 1 MiB maximum AWS allows since 2025 is not assumed.
SQS_MESSAGE_BYTES = 262_144
# SendMessageBatch: at most 10 entries whose bodies add up to at most 1 MiB (botocore's SQS
# model, 2025). The adapter keeps each request under the smaller 256 KiB, which every queue
# and every region accepts.
SQS_BATCH_ENTRIES = 10
SQS_BATCH_REQUEST_BYTES = 262_144
DYNAMODB_ITEM_BYTES = 409_600  # 400 KB, attribute names included

# --- campaign spec -------------------------------------------------------------------
CAMPAIGN_NAME_CHARS = 200
SUBJECT_CHARS = 998  # RFC 5322: a header line is at most 998 characters
ADDRESS_CHARS = 254  # RFC 5321 path (256) less the angle brackets
ADDRESS_LOCAL_CHARS = 64  # RFC 5321
DISPLAY_NAME_CHARS = 64
# "Name <address>" in all: no longer than an address may be, so that the limit on the
# address holds whatever the name (a pattern cannot count the two apart).
SENDER_CHARS = ADDRESS_CHARS
PROVIDER_CHARS = 32
# The campaign is one DynamoDB item holding subject, html and text: 200 KB + 100 KB leaves a
# quarter of the 400 KB item for everything else. (Gmail clips HTML over ~102 KB: keep the
# unsubscribe footer above that, see docs/limits.md.)
HTML_BYTES = 200_000
TEXT_BYTES = 100_000
# An A/B campaign's variants (campaigns/variants.py) are in the same content item: all its
# html and text together fit what one campaign's may take.
TEMPLATES_BYTES = HTML_BYTES + TEXT_BYTES
SPEC_FILE_BYTES = 1_048_576

# --- recipients ----------------------------------------------------------------------
RECIPIENTS_PER_BATCH = MAX_RECIPIENTS_PER_BATCH  # one SQS message
# A batch (up to 100 recipients) is one SQS message and one DynamoDB item: 100 x 2,500 bytes
# plus the envelope stays under both 256 KiB limits.
RECIPIENT_JSON_BYTES = 2_500
VARIABLES_PER_RECIPIENT = 50
VARIABLE_NAME_CHARS = 64
# A recipient row cannot be longer than a recipient; longer lines are refused before they
# are held in memory whole.
RECIPIENT_LINE_BYTES = 16_384
INLINE_RECIPIENTS = 1_000

# --- test sends (docs/operations-campaigns.md) ----------------------------------------
# A test send goes to the operator's own addresses, not to an audience: a few per call keep
# it from becoming a way round the ledger (every real recipient is sent once, through it).
TEST_SEND_ADDRESSES = 5
# What `campaign status` shows of a campaign's test sends (with the count of all of them).
TEST_SENDS_SHOWN = 5

# --- schedules (docs/operations-campaigns.md) ------------------------------------------
# How far ahead a send may be scheduled: a year, past which a campaign's content and
# audience are rarely still what was meant (EventBridge Scheduler itself has no limit).
SCHEDULE_AHEAD_DAYS = 366

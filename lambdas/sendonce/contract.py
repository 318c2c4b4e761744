"""Names shared by the Lambda code, the CDK construct (`sendonce_cdk`), the CLI and the tests.

A name written in two places drifts; each is written here once. The construct sets the
environment variables the settings read, publishes alarms on the metrics the handlers
emit, and the stack exports the outputs the CLI and the local tooling read.
"""

from __future__ import annotations

from enum import StrEnum

# Powertools reads these two; the construct sets them on every function.
SERVICE_NAME = "sendonce"
METRICS_NAMESPACE = "Sendonce"
POWERTOOLS_SERVICE_NAME = "POWERTOOLS_SERVICE_NAME"
POWERTOOLS_METRICS_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"
# Powertools' Logger level, and the dimension its Metrics add to every metric (= SERVICE_NAME).
LOG_LEVEL = "LOG_LEVEL"
METRIC_SERVICE_DIMENSION = "service"
# Set, it would make Powertools skip the ledger; the settings refuse to start instead.
POWERTOOLS_IDEMPOTENCY_DISABLED = "POWERTOOLS_IDEMPOTENCY_DISABLED"

# The campaigns table's sparse, keys-only index of campaign state items (only they carry
# `state`), which `campaign list` queries; and the attribute its TTL reads (limiter slots).
CAMPAIGNS_BY_STATE_INDEX = "campaigns-by-state"
CAMPAIGNS_TTL_ATTRIBUTE = "expires_at"
# The sort-key prefix of a published batch record in the campaigns table: the counters'
# stream mapping passes inserted items whose `sk` begins with it, and nothing else (the
# batch's enqueued marker is `batch-enqueued#`, its groups `group#`).
BATCH_RECORD_SK_PREFIX = "batch#"
# The counters' aggregator's stream mappings: a batch is up to this many records, gathered
# for up to this many seconds. One write per counter item per batch: bigger batches, fewer
# writes per record. The construct maps the streams so; bench-scale's stream poller batches the same.
AGGREGATOR_BATCH_SIZE = 1000
AGGREGATOR_BATCHING_WINDOW_SECONDS = 2

# Every setting field `name` is read from SENDONCE_<NAME> (sendonce.settings).
ENV_PREFIX = "SENDONCE_"


def env_name(field: str) -> str:
    """The environment variable of a settings field: `ledger_table` -> `SENDONCE_LEDGER_TABLE`."""
    return ENV_PREFIX + field.upper()


class Metric(StrEnum):
    """What the handlers publish (EMF, namespace METRICS_NAMESPACE, dimension service)."""

    # The consumer.
    EMAILS_SENT = "EmailsSent"
    DUPLICATE_SENDS_PREVENTED = "DuplicateSendsPrevented"
    UNKNOWN_OUTCOMES = "UnknownOutcomes"
    DEAD_LETTERED_RECIPIENTS = "DeadLetteredRecipients"
    RECIPIENTS_SUPPRESSED = "RecipientsSuppressed"
    PAYLOAD_CONFLICTS = "PayloadConflicts"
    POISON_MESSAGES = "PoisonMessages"
    CAMPAIGN_SKIPS_PAUSED = "CampaignSkipsPaused"
    SEND_FAILURES_PERMANENT = "SendFailuresPermanent"
    SEND_FAILURES_RETRYABLE = "SendFailuresRetryable"
    SEND_FAILURES_HALT = "SendFailuresHalt"
    SEND_FAILURES_AMBIGUOUS = "SendFailuresAmbiguous"
    # The events function.
    PROVIDER_EVENTS_APPLIED = "ProviderEventsApplied"
    PROVIDER_EVENTS_DUPLICATE = "ProviderEventsDuplicate"
    PROVIDER_EVENTS_UNMATCHED = "ProviderEventsUnmatched"
    COMPLAINTS = "Complaints"
    HARD_BOUNCES = "HardBounces"
    SUPPRESSIONS_ADDED = "SuppressionsAdded"
    UNKNOWN_OUTCOMES_RESOLVED = "UnknownOutcomesResolved"
    COMPLAINT_BRAKE_TRIGGERED = "ComplaintBrakeTriggered"
    BOUNCE_BRAKE_TRIGGERED = "BounceBrakeTriggered"
    WEBHOOK_SIGNATURES_REJECTED = "WebhookSignaturesRejected"
    # The unsubscribe function.
    RECIPIENTS_UNSUBSCRIBED = "RecipientsUnsubscribed"
    UNSUBSCRIBE_TOKENS_REJECTED = "UnsubscribeTokensRejected"
    # The counters' aggregator.
    COUNTER_RECORDS_APPLIED = "CounterRecordsApplied"
    COUNTER_RECORDS_REPEATED = "CounterRecordsRepeated"
    CAMPAIGNS_COMPLETED_BY_COUNTERS = "CampaignsCompletedByCounters"
    # The account health check (published only when not zero).
    ACCOUNT_ON_PROBATION = "AccountOnProbation"
    ACCOUNT_SENDING_STOPPED = "AccountSendingStopped"
    CAMPAIGNS_PAUSED_FOR_ACCOUNT = "CampaignsPausedForAccount"


# Published a second time per campaign, with the dimension METRIC_CAMPAIGN_DIMENSION beside
# `service` (a series of its own: the service-wide ones, which the alarms read, are
# unchanged). Five series per campaign that sends, billed only for the hours they are
# published; nothing per recipient.
METRIC_CAMPAIGN_DIMENSION = "campaign"
CAMPAIGN_METRICS = (
    Metric.EMAILS_SENT,
    Metric.DUPLICATE_SENDS_PREVENTED,
    Metric.UNKNOWN_OUTCOMES,
    Metric.HARD_BOUNCES,
    Metric.COMPLAINTS,
)

# A provider error's class (sendonce.domain.errors) -> the consumer's failure metric.
FAILURE_METRICS = {
    "permanent": Metric.SEND_FAILURES_PERMANENT,
    "retryable": Metric.SEND_FAILURES_RETRYABLE,
    "halt": Metric.SEND_FAILURES_HALT,
    "ambiguous": Metric.SEND_FAILURES_AMBIGUOUS,
}


class Output(StrEnum):
    """The repository stack's outputs (sendonce_infra/stack.py); the CLI and the local deploy read them."""

    QUEUE_URL = "QueueUrl"
    QUEUE_ARN = "QueueArn"
    DEAD_LETTER_QUEUE_URL = "DeadLetterQueueUrl"
    DEAD_LETTER_QUEUE_ARN = "DeadLetterQueueArn"
    LEDGER_TABLE_NAME = "LedgerTableName"
    CAMPAIGNS_TABLE_NAME = "CampaignsTableName"
    SUPPRESSIONS_TABLE_NAME = "SuppressionsTableName"
    ON_CALL_TOPIC_ARN = "OnCallTopicArn"
    CONSUMER_FUNCTION_NAME = "ConsumerFunctionName"
    EVENTS_FUNCTION_NAME = "EventsFunctionName"
    EVENTS_DEAD_LETTER_QUEUE_URL = "EventsDeadLetterQueueUrl"
    SCHEDULE_GROUP_NAME = "ScheduleGroupName"
    SCHEDULER_ROLE_ARN = "SchedulerRoleArn"
    SCHEDULED_START_FUNCTION_ARN = "ScheduledStartFunctionArn"
    API_URL = "ApiUrl"
    PUBLIC_API_URL = "PublicApiUrl"

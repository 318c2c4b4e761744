"""Campaigns and their published batches in one DynamoDB table (pk, sk).

    pk = campaign#<id>, sk = campaign        the campaign's state and settings (small: updated per message)
    pk = campaign#<id>, sk = content         its content (templates, up to 300 KB), written once with it
    pk = campaign#<id>#b<k>, sk = batch#<batch>, batch-enqueued#<batch>, group#<batch>-g<n>
                                             its published batches, whether each reached SQS, and
                                             batch mode's send groups, over `batch_shards`
                                             partition-key values (adapters/dynamodb/batch_records.py)
    pk = counters#<id>, ...                  its counters (adapters/dynamodb/counters.py): add_batch
                                             counts each batch record there; `counted` stores mark a
                                             campaign counted from its creation
    pk = report#<id>[#<writer>], ...         its report's aggregates (adapters/dynamodb/report_aggregates.py);
                                             `transition` with a `mark` writes one mark item there

`list` queries the sparse, keys-only index CAMPAIGNS_BY_STATE_INDEX (state, campaign_id):
only campaign state items carry `state`, so it never reads batches, groups, counters or
limiter slots; and being keys-only, updates of a campaign's counts never write to it.

The adapter is one class, `DynamoDBCampaignStore`, in layers by the items it writes:
campaigns/items.py (the campaign's state, content and publish leases) under
campaigns/batches.py (its batch records, queue markers and send groups); batch keys,
counters and report aggregates are modules of their own.
"""

from __future__ import annotations

from sendonce.adapters.dynamodb.campaigns.batches import CampaignBatches
from sendonce.adapters.dynamodb.campaigns.items import HOLDER_PREFIX

__all__ = ["HOLDER_PREFIX", "DynamoDBCampaignStore"]


class DynamoDBCampaignStore(CampaignBatches):
    """The campaign store (domain/campaigns/ports.py `CampaignStore`) on the campaigns table."""

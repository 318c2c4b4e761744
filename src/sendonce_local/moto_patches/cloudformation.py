"""CloudFormation stack updates that change a DynamoDB table (a defect fix).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_cloudformation.py.
"""

from __future__ import annotations

import functools
from typing import Any

from sendonce_local.moto_patches.replacing import Replace


def stack_updates_keep_dynamodb_tables(replace: Replace) -> None:
    """A CloudFormation stack update that changes a DynamoDB table drops the table from the stack.

    ``Table`` has no ``update_from_cloudformation_json``, so moto's ``parse_and_update_resource``
    returns None for a modified table and stores None as the resource: the update then fails
    on the first ``Fn::GetAtt`` of it ("references undefined resource"), and a table that
    gains an index, a stream or a TTL in a new release cannot be upgraded in moto at all.
    CloudFormation updates these properties in place (AWS::DynamoDB::Table: "Update requires:
    No interruption"); a new name or key schema means replacement, which sendonce's tables
    must never need (tests/infra/test_upgrade.py checks the template for it).

    The patch keeps the existing table, applies what is updated in place (new global
    secondary indexes, the stream specification, the TTL) and refuses a change that would
    need a replacement instead of silently keeping the old table. moto's update also creates
    the template's new resources first: one reading the `StreamArn` of a table that gains
    its stream in the same update (an event source mapping) found none; the stream is then
    enabled when its ARN is first read.
    """
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.table import Table

    def update_from_cloudformation_json(
        cls: type, original_resource: Any, new_resource_name: str, cloudformation_json: dict[str, Any],
        account_id: str, region_name: str,
    ) -> Any:  # fmt: skip
        properties = cloudformation_json["Properties"]
        table = original_resource
        # Without a TableName, moto draws a new random name for every update: only a name the
        # template gives can differ.
        named = properties.get("TableName")
        schema = properties.get("KeySchema")
        if (named is not None and named != table.name) or (schema is not None and schema != table.schema):
            raise ValueError(f"updating table {table.name} needs a replacement, which this patch does not do")
        backend = dynamodb_backends[account_id][region_name]
        existing = {index.name for index in table.global_indexes}
        wanted = properties.get("GlobalSecondaryIndexes", [])
        if wanted:
            table.attr = properties.get("AttributeDefinitions", table.attr)
            creates = [{"Create": index} for index in wanted if index["IndexName"] not in existing]
            if creates:
                backend.update_table_global_indexes(table, creates)
        stream = properties.get("StreamSpecification")
        if stream and not table.latest_stream_label:
            backend.update_table_streams(table, {"StreamEnabled": True, **stream})
        elif stream and table.stream_specification:
            # Enabled early by a new resource that read its ARN (below): the template's view.
            table.stream_specification["StreamViewType"] = stream.get("StreamViewType", "NEW_AND_OLD_IMAGES")
        ttl = properties.get("TimeToLiveSpecification")
        if ttl:
            backend.update_time_to_live(table.name, ttl)
        return table

    replace(Table, "update_from_cloudformation_json", classmethod(update_from_cloudformation_json))

    stock_attribute = Table.get_cfn_attribute

    @functools.wraps(stock_attribute)
    def get_cfn_attribute(self: Any, attribute_name: str) -> Any:
        # moto's update creates the template's new resources before it updates the changed
        # ones: a new resource that reads `StreamArn` of a table gaining its stream in the
        # same update (a stream mapping, a policy) would find none (KeyError, HTTP 500).
        # CloudFormation resolves it after the table; here the stream is enabled when first
        # read, and the table's own update then sets the template's view type.
        if attribute_name == "StreamArn" and not self.latest_stream_label:
            dynamodb_backends[self.account_id][self.region_name].update_table_streams(
                self, {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
            )
        return stock_attribute(self, attribute_name)

    replace(Table, "get_cfn_attribute", get_cfn_attribute)

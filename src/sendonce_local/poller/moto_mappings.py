"""moto's own SQS event source mappings, switched off so that a local poller takes their place:
moto cannot run Lambda code, and its mapping would only raise receive counts."""

from __future__ import annotations

from typing import Any


def disable_moto_event_source_mappings(lambda_client: Any, function_name: str) -> list[dict[str, Any]]:
    """Switch off a function's event source mappings in moto and return their settings.

    moto's own mapping receives messages on every SendMessage, fails to invoke (no
    Docker) and makes them visible again, pushing them towards the dead-letter queue
    unseen. The returned settings are what a local poller should mimic: ``uuid``,
    ``queue_arn``, ``batch_size``, ``max_concurrency`` (ScalingConfig.MaximumConcurrency,
    None if unset), ``function_response_types``, ``maximum_batching_window_s`` and
    ``state`` (before disabling).
    """
    settings = []
    paginator = lambda_client.get_paginator("list_event_source_mappings")
    for page in paginator.paginate():
        for mapping in page.get("EventSourceMappings", []):
            if not _is_function(mapping.get("FunctionArn", ""), function_name):
                continue
            settings.append(
                {
                    "uuid": mapping["UUID"],
                    "queue_arn": mapping.get("EventSourceArn"),
                    "batch_size": mapping.get("BatchSize"),
                    "max_concurrency": (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency"),
                    "function_response_types": list(mapping.get("FunctionResponseTypes") or []),
                    "maximum_batching_window_s": mapping.get("MaximumBatchingWindowInSeconds"),
                    "state": mapping.get("State"),
                }
            )
            lambda_client.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    return settings


def _is_function(function_arn: str, function_name: str) -> bool:
    if function_arn == function_name:
        return True
    parts = function_arn.split(":")
    return len(parts) >= 7 and parts[5] == "function" and parts[6] == function_name

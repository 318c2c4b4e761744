"""The cdk-nag AwsSolutions findings SendOnce's design accepts, each acknowledged on the
one resource it is about, with its reason; and the route wildcards of `grant_publish` /
`grant_operate`. A mixin of `SendOnce` (sendonce_cdk/construct.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct


def acknowledge(scope: Any, finding: str, reason: str) -> None:
    """One cdk-nag AwsSolutions finding (`IAM5[Resource::...]`, `L1`, ...) accepted on `scope`, with why."""
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::AwsSolutions-{finding}", reason=reason))


class SendOnceFindings:
    """Acknowledgements, made once `SendOnce.__init__` has built every part."""

    def _acknowledge_route_wildcards(self, grantee: iam.IGrantable, resource_arns: Sequence[str]) -> None:
        """cdk-nag's IAM5 on the grantee's policy, for exactly these execute-api ARNs.

        The `*` in them stands for a campaign id (or, for grant_operate, any route of this
        one API): the grant is this construct's, so is the acknowledgement. Only for a
        grantee in this stack: elsewhere the ARN reaches the policy as a cross-stack
        import, cdk-nag names the finding after that, and it stays for the app to judge.
        """
        if not Construct.is_construct(grantee) or cdk.Stack.of(grantee).node.path != cdk.Stack.of(self).node.path:
            return
        stack = cdk.Stack.of(self)
        for arn in resource_arns:
            rendered = _nag_rendering(stack.resolve(arn))
            if rendered is None:
                continue
            acknowledge(
                grantee,
                f"IAM5[Resource::{rendered}]",
                (
                    "execute-api:Invoke on routes of the sendonce operator API only; the wildcard is"
                    " the campaign id in the path (or, for grant_operate, every route of that one API)."
                ),
            )

    def _acknowledge_findings(self) -> None:
        """cdk-nag AwsSolutions findings this design accepts, each with its reason."""
        acknowledge(
            self.aggregator.role,
            "IAM5[Resource::*]",
            (
                "Only dynamodb:ListStreams, which the stream event source needs and which IAM does not scope"
                " to resources; the stream reads themselves are scoped to the two tables' streams."
            ),
        )
        for function in (
            self.consumer_parts.function,
            self.operator_api.function,
            self.scheduled_start.function,
            self.provider_events.function,
            self.public_api.unsubscribe_function,
            self.aggregator.function,
            self.jobs.function,
            *(check.function for check in self.account_health.values()),
        ):
            acknowledge(
                function,
                "L1",
                (
                    "Python 3.12 on purpose: the bundle is built from cp312 manylinux2014_aarch64 wheels"
                    " (pydantic-core, markupsafe) that must match the runtime, and the Lambda code is"
                    " tested on 3.12. Moving to a newer runtime changes RUNTIME and PYTHON_VERSION in"
                    " sendonce_cdk/bundling.py together, after the tests pass on it."
                ),
            )
        for stack in self.config.deployed:
            stack.acknowledge(self)
        acknowledge(
            self.operator_api.role,
            f"IAM5[Resource::{_nag_rendering(cdk.Stack.of(self).resolve(self.scheduled_start.schedules_arn))}]",
            (
                "Only scheduler:CreateSchedule/UpdateSchedule/DeleteSchedule (statement SetCampaignSchedules)"
                " on the schedules of this stack's one schedule group: a schedule is named after the"
                " campaign it starts, known at request time. No other group, no schedule group changes."
            ),
        )
        acknowledge(
            self.consumer_parts.role,
            f"IAM5[Resource::{_nag_rendering(cdk.Stack.of(self).resolve(self.scheduled_start.schedules_arn))}]",
            (
                "Only scheduler:CreateSchedule/UpdateSchedule (statement SetWindowOpeningSchedules) on the"
                " schedules of this stack's one schedule group: a send window's opening schedule is named"
                " after the campaign and the opening, known when the window pauses it. No delete, no other group."
            ),
        )
        if self.config.recipients_bucket:
            for role in (self.operator_api.role, self.jobs.role):
                acknowledge(
                    role,
                    f"IAM5[Resource::arn:<AWS::Partition>:s3:::{self.config.recipients_bucket}/*]",
                    (
                        "Only s3:GetObject (statements ReadRecipientFiles, ReadRecipientFileRanges) on the one"
                        " bucket operators publish recipient files from: a publish names its object key at"
                        " request time, so the keys cannot be listed in the policy. No list, write or delete."
                    ),
                )
        acknowledge(
            self.public_api.api,
            "APIG4",
            (
                "The public API's callers cannot sign with SigV4 or hold a token: mailbox providers and"
                " people following a List-Unsubscribe link (RFC 8058), and email providers delivering"
                " webhooks. Each handler authorizes the request itself: the unsubscribe token's"
                " HMAC-SHA256, the webhook's signature as its provider defines it (Svix, a +-300 s window);"
                " anything else gets 403/401 and changes nothing. The operator API (everything that"
                " changes campaigns) requires AWS_IAM."
            ),
        )
        acknowledge(
            self.provider_events.dead_letter_queue,
            "SQS3",
            (
                "This queue is itself a dead-letter queue: the EventBridge target's and the events"
                " function's on-failure destination for asynchronous invocations. cdk-nag only"
                " recognises DLQs named in another queue's RedrivePolicy."
            ),
        )
        acknowledge(
            self.aggregator.dead_letter_queue,
            "SQS3",
            (
                "This queue is itself a dead-letter queue: the on-failure destination of the counters'"
                " stream mappings. cdk-nag only recognises DLQs named in another queue's RedrivePolicy."
            ),
        )


def _nag_rendering(resolved: Any) -> str | None:
    """A resolved ARN the way cdk-nag names it in a finding: `Ref`s as `<Name>`,
    `Fn::GetAtt`s as `<Name.Attribute>`, joined. None for anything else."""
    if isinstance(resolved, str):
        return resolved
    if isinstance(resolved, dict) and len(resolved) == 1:
        ((function, argument),) = resolved.items()
        if function == "Ref" and isinstance(argument, str):
            return f"<{argument}>"
        if function == "Fn::GetAtt" and isinstance(argument, list) and len(argument) == 2:
            return f"<{argument[0]}.{argument[1]}>"
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            parts = [_nag_rendering(part) for part in argument[1]]
            return None if None in parts else str(argument[0]).join(parts)  # type: ignore[arg-type]
    return None

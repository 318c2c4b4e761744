"""The one Lambda function construct: every sendonce handler runs in a `ServiceFunction`
(the consumer is one with its SQS event source added, sendonce_cdk/consumer.py)."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from sendonce import contract
from sendonce_cdk.bundling import ARCHITECTURE, RUNTIME, lambda_code


class ServiceFunction(Construct):
    """One handler of the `lambdas/` bundle: function, log group, role.

    `settings` are the values of the handler's settings model (sendonce.settings), by
    field name; each reaches the function as the variable `contract.env_name(field)`, so
    no caller spells a SENDONCE_* name. Powertools' service name and metrics namespace
    come from the contract too: the alarms watch exactly that namespace and dimension.

    The role is the function's own, with log writes scoped to its log group (no
    AWSLambdaBasicExecutionRole); everything else is granted by the stack.

    Public attributes: `function`, `role`, `log_group`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: str,
        description: str,
        settings: Mapping[str, str],
        timeout: cdk.Duration,
        memory_size: int = 256,
        reserved_concurrency: int | None = None,
        role_description: str | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=removal_policy
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=role_description or description,
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=code or lambda_code(),
            timeout=timeout,
            memory_size=memory_size,
            # Also a cap: what this function may take from the account's pool at most.
            reserved_concurrent_executions=reserved_concurrency,
            role=self.role,
            log_group=self.log_group,
            environment={
                **{contract.env_name(field): value for field, value in settings.items()},
                contract.POWERTOOLS_SERVICE_NAME: contract.SERVICE_NAME,
                contract.POWERTOOLS_METRICS_NAMESPACE: contract.METRICS_NAMESPACE,
                contract.LOG_LEVEL: "INFO",
            },
        )

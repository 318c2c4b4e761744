"""A sendonce Lambda function with its own log group and role (the API and deliverability
functions; the consumer predates it and keeps its own construct ids)."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from sendonce_cdk.bundling import ARCHITECTURE, RUNTIME, lambda_code
from sendonce_cdk.consumer import METRICS_NAMESPACE, SERVICE_NAME


class ServiceFunction(Construct):
    """One handler of the `lambdas/` bundle: function, log group, role.

    The role is the function's own, with log writes scoped to its log group (no
    AWSLambdaBasicExecutionRole); everything else is granted by the stack.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        timeout: cdk.Duration,
        memory_size: int = 256,
        reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=removal_policy
        )
        self.role = iam.Role(
            self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description
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
                **environment,
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "LOG_LEVEL": "INFO",
            },
        )

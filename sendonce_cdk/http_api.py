"""An API Gateway HTTP API with its `$default` stage, throttling and access log."""

from __future__ import annotations

import json
from collections.abc import Sequence

import jsii

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_logs as logs
from constructs import Construct

# The route key ("GET /u/{token}"), never the path: a path can carry an unsubscribe token.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationStatus": "$context.integrationStatus",
    "integrationError": "$context.integrationErrorMessage",
    "sourceIp": "$context.identity.sourceIp",
    # The IAM principal on the operator API (empty on the public one).
    "caller": "$context.identity.userArn",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    """JSON lines into `log_group` (an interface in CDK, not a struct: no plain dict)."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._log_group = log_group

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return apigwv2.LogGroupLogDestination(self._log_group)

    @property
    def format(self) -> apigateway.AccessLogFormat:
        return apigateway.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS, separators=(",", ":")))


class LoggedHttpApi(Construct):
    """An HTTP API whose only stage is `$default`: auto-deployed, access-logged, and throttled
    as a whole (`rate_limit`) or per route (`throttle_routes`)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        description: str,
        rate_limit: int | None = None,
        burst_limit: int | None = None,
        default_authorizer: apigwv2.IHttpRouteAuthorizer | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, id)
        self.api = apigwv2.HttpApi(
            self,
            "Api",
            description=description,
            create_default_stage=False,
            default_authorizer=default_authorizer,
        )
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=removal_policy
        )
        self.stage = apigwv2.HttpStage(
            self,
            "Stage",
            http_api=self.api,
            auto_deploy=True,
            # None: only the account's API Gateway limits apply, except on throttled routes.
            throttle=(
                apigwv2.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit)
                if rate_limit is not None
                else None
            ),
            access_log_settings=_AccessLogSettings(self.access_logs),
        )
        stack = cdk.Stack.of(self)
        # From the API's Ref, not Fn::GetAtt ApiEndpoint: moto's CloudFormation skips
        # HTTP APIs, and a GetAtt on a skipped resource fails the local deploy.
        self.url = f"https://{self.api.api_id}.execute-api.{stack.region}.{stack.url_suffix}/"
        self._route_settings: dict[str, dict[str, int]] = {}

    def throttle_routes(self, routes: Sequence[apigwv2.HttpRoute], *, rate_limit: int, burst_limit: int) -> None:
        """Per-route throttling on the stage (`RouteSettings`, keyed by route key)."""
        for route in routes:
            cfn_route = route.node.default_child
            if not isinstance(cfn_route, apigwv2.CfnRoute):
                raise TypeError(f"{route.node.path} has no CfnRoute")
            self._route_settings[cfn_route.route_key] = {
                "ThrottlingRateLimit": rate_limit,
                "ThrottlingBurstLimit": burst_limit,
            }
            # A stage's route settings may only name routes that exist already.
            self.stage.node.add_dependency(route)
        cfn_stage = self.stage.node.default_child
        if not isinstance(cfn_stage, apigwv2.CfnStage):
            raise TypeError(f"{self.stage.node.path} has no CfnStage")
        cfn_stage.add_property_override("RouteSettings", dict(self._route_settings))

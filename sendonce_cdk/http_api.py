"""An API Gateway HTTP API with its `$default` stage, throttling and access log, and the
routes that proxy to a Lambda function (the operator API and the public API alike)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
import jsii
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
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


@dataclass(frozen=True)
class RouteThrottle:
    """API Gateway throttling: sustained requests/s and the burst above it."""

    rate_limit: int
    burst_limit: int


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
    as a whole (`default_throttle`) or per route (`add_function_routes`, `throttle_routes`).

    Public attributes: `api`, `stage`, `access_logs`, `url`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        description: str,
        default_throttle: RouteThrottle | None = None,
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
                None
                if default_throttle is None
                else apigwv2.ThrottleSettings(
                    rate_limit=default_throttle.rate_limit, burst_limit=default_throttle.burst_limit
                )
            ),
            access_log_settings=_AccessLogSettings(self.access_logs),
        )
        stack = cdk.Stack.of(self)
        # From the API's Ref, not Fn::GetAtt ApiEndpoint: moto's CloudFormation skips
        # HTTP APIs, and a GetAtt on a skipped resource fails the local deploy.
        self.url = f"https://{self.api.api_id}.execute-api.{stack.region}.{stack.url_suffix}/"
        self._route_settings: dict[str, dict[str, int]] = {}

    def add_function_routes(
        self,
        id: str,
        *,
        function: lambda_.IFunction,
        routes: Sequence[tuple[apigwv2.HttpMethod, str]],
        throttle: RouteThrottle | None = None,
        permission_per_route: bool = True,
    ) -> list[apigwv2.HttpRoute]:
        """Routes (method, path) proxied to `function` through one integration named `id`.

        `throttle` limits each of these routes on the stage; `permission_per_route=False`
        grants API Gateway one invoke permission for the whole API instead of one per route.
        """
        integration = integrations.HttpLambdaIntegration(id, function, scope_permission_to_route=permission_per_route)
        added = [
            route
            for method, path in routes
            for route in self.api.add_routes(path=path, methods=[method], integration=integration)
        ]
        if throttle is not None:
            self.throttle_routes(added, throttle=throttle)
        return added

    def throttle_routes(self, routes: Sequence[apigwv2.HttpRoute], *, throttle: RouteThrottle) -> None:
        """Per-route throttling on the stage (`RouteSettings`, keyed by route key)."""
        for route in routes:
            cfn_route = route.node.default_child
            if not isinstance(cfn_route, apigwv2.CfnRoute):
                raise TypeError(f"{route.node.path} has no CfnRoute")
            self._route_settings[cfn_route.route_key] = {
                "ThrottlingRateLimit": throttle.rate_limit,
                "ThrottlingBurstLimit": throttle.burst_limit,
            }
            # A stage's route settings may only name routes that exist already.
            self.stage.node.add_dependency(route)
        cfn_stage = self.stage.node.default_child
        if not isinstance(cfn_stage, apigwv2.CfnStage):
            raise TypeError(f"{self.stage.node.path} has no CfnStage")
        cfn_stage.add_property_override("RouteSettings", dict(self._route_settings))

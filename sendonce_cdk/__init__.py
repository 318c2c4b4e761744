"""The sendonce pipeline as a reusable CDK construct (tracker issue 12)."""

from sendonce_cdk.construct import SendOnce

__all__ = ["SendOnce"]

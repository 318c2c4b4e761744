"""Reading operator files (recipient lists) from S3 as a stream of text lines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from sendonce.domain.campaigns.operator_input import RecipientFileError

_MISSING = {"NoSuchKey", "NoSuchBucket", "404", "AccessDenied", "403"}


class S3ObjectLines:
    def __init__(self, *, client: Any):
        self._client = client

    def lines(self, bucket: str, key: str) -> Iterator[str]:
        """The object's lines, decoded as UTF-8 with their line endings, one at a time."""
        name = f"s3://{bucket}/{key}"
        try:
            body = self._client.get_object(Bucket=bucket, Key=key)["Body"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _MISSING:
                raise RecipientFileError(f"{name}: cannot be read ({code})") from exc
            raise
        return self._decoded(body, name)

    @staticmethod
    def _decoded(body: Any, name: str) -> Iterator[str]:
        try:
            for number, raw in enumerate(body.iter_lines(keepends=True), start=1):
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise RecipientFileError(f"{name}:{number}: not UTF-8 text") from exc
        finally:
            body.close()

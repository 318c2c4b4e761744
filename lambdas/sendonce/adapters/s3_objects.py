"""Reading operator files (recipient lists) from S3 as a stream of text lines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from sendonce.domain.campaigns.ports import StoredObject
from sendonce.domain.campaigns.recipients_file import MissingFileError, RecipientFileError

_MISSING = {"NoSuchKey", "NoSuchBucket", "404", "AccessDenied", "403"}
_CHANGED = {"PreconditionFailed", "412"}


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

    def head(self, bucket: str, key: str) -> StoredObject:
        """Its size and the ETag (and version, on a versioned bucket) that pin it."""
        try:
            answer = self._client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _MISSING:
                raise MissingFileError(f"s3://{bucket}/{key}: cannot be read ({code})") from exc
            raise
        return StoredObject(size=answer["ContentLength"], etag=answer["ETag"], version_id=answer.get("VersionId"))

    def lines_in_range(self, bucket: str, key: str, start: int, end: int, *, pinned: StoredObject) -> Iterator[str]:
        """The lines that start at a byte in [start, end): read from the byte before `start`
        (a line that starts there follows a newline) to the end of the last such line, one
        ranged GET that must match the pinned ETag (and version)."""
        name = f"s3://{bucket}/{key}"
        first = max(0, start - 1)
        request = {"Bucket": bucket, "Key": key, "Range": f"bytes={first}-{pinned.size - 1}", "IfMatch": pinned.etag}
        if pinned.version_id:
            request["VersionId"] = pinned.version_id
        try:
            body = self._client.get_object(**request)["Body"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _CHANGED:
                raise RecipientFileError(f"{name}: changed since the publish started; publish it again") from exc
            if code in _MISSING:
                raise RecipientFileError(f"{name}: cannot be read ({code})") from exc
            raise
        return self._ranged(body, name, first, start, end)

    @staticmethod
    def _ranged(body: Any, name: str, position: int, start: int, end: int) -> Iterator[str]:
        try:
            for raw in body.iter_lines(keepends=True):
                at, position = position, position + len(raw)
                if at < start:
                    continue  # the end of the line before the range (or just its newline)
                if at >= end:
                    return
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise RecipientFileError(f"{name}: the line at byte {at:,} is not UTF-8 text") from exc
        finally:
            body.close()

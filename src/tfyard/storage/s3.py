"""The S3 protocol, through boto3 (the `cloud` extra): AWS's own credential chain
(environment, shared files, web identity), region and `AWS_ENDPOINT_URL_S3` /
`AWS_ENDPOINT_URL` for any S3-compatible store. Each failure a user can fix is one line
naming the URL and the fix, never the credentials."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from datetime import timezone

from tfyard.errors import UserError
from tfyard.storage.location import Location
from tfyard.storage.store import Entry, Head

# A wrong endpoint or a store that is down is named in seconds: a short connect timeout and
# few attempts (botocore's standard mode backs off between them on transient errors).
CONNECT_SECONDS = 5
READ_SECONDS = 60
ATTEMPTS = 4


class S3Store:
    """An S3 bucket (or any S3-compatible store's), through one boto3 client (safe to share
    between threads)."""

    conditions = "conditional writes (If-None-Match)"

    def __init__(self):
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise UserError("s3:// paths need the cloud extra: pip install 'tfyard[cloud]'") \
                from None
        self.client = boto3.session.Session().client("s3", config=Config(
            connect_timeout=CONNECT_SECONDS, read_timeout=READ_SECONDS,
            retries={"max_attempts": ATTEMPTS, "mode": "standard"},
            # checksums only where S3 requires them: many S3-compatible stores refuse the rest
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required"))

    def where(self) -> str:
        return (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
                or "AWS's own")

    def listing(self, place: Location, flag: str, beginning: str = "") -> Iterator[Entry]:
        prefix = f"{place.key}/" if place.key else ""
        with explained(place, flag, self.where()):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=place.bucket, Prefix=prefix + beginning):
                for item in page.get("Contents", []):
                    name = item["Key"][len(prefix):]
                    if name and not name.endswith("/"):
                        yield Entry(name, item["Size"], item["LastModified"].timestamp())

    def download(self, place: Location, target: str, flag: str) -> None:
        with explained(place, flag, self.where()), open(target, "wb") as handle:
            body = self.client.get_object(Bucket=place.bucket, Key=place.key)["Body"]
            shutil.copyfileobj(body, handle, 1 << 20)

    def put(self, place: Location, body: bytes, flag: str, *, if_absent: bool = False,
            if_match: str | None = None) -> str | None:
        from botocore.exceptions import ClientError

        condition = {"IfNoneMatch": "*"} if if_absent else {}
        if if_match:
            condition["IfMatch"] = if_match
        with explained(place, flag, self.where()):
            try:
                return self.client.put_object(Bucket=place.bucket, Key=place.key, Body=body,
                                              **condition)["ETag"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _CONDITION_FAILED:
                    return None
                raise

    def head(self, place: Location, flag: str) -> Head | None:
        """The object's age is read by the store's own clock (hosts' clocks may differ)."""
        from email.utils import parsedate_to_datetime

        from botocore.exceptions import ClientError

        with explained(place, flag, self.where()):
            try:
                answer = self.client.head_object(Bucket=place.bucket, Key=place.key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _MISSING:
                    return None
                raise
        now = parsedate_to_datetime(answer["ResponseMetadata"]["HTTPHeaders"]["date"])
        if now.tzinfo is None:   # HTTP dates are GMT
            now = now.replace(tzinfo=timezone.utc)
        return Head(answer["ETag"], max(0.0, (now - answer["LastModified"]).total_seconds()))

    def read(self, place: Location, flag: str) -> bytes | None:
        from botocore.exceptions import ClientError

        with explained(place, flag, self.where()):
            try:
                return self.client.get_object(Bucket=place.bucket, Key=place.key)["Body"].read()
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _MISSING:
                    return None
                raise

    def upload(self, path: str, place: Location, flag: str) -> None:
        """Multipart for large files, each part retried."""
        with open(path, "rb") as handle, explained(place, flag, self.where()):
            self.client.upload_fileobj(handle, place.bucket, place.key)

    def delete(self, place: Location, flag: str) -> None:
        with explained(place, flag, self.where()):
            self.client.delete_object(Bucket=place.bucket, Key=place.key)


# What a store answers when a conditional write's condition does not hold: 412, or 409 when
# another conditional write to the key was in flight at the same moment; and for no object.
_CONDITION_FAILED = ("PreconditionFailed", "ConditionalRequestConflict")
_MISSING = ("404", "NoSuchKey", "NotFound")


@contextlib.contextmanager
def explained(url: Location | str, flag: str, endpoint: str):
    """Turn what boto3 raises into one line naming `flag`, `url` and the fix."""
    from botocore import exceptions

    try:
        yield
    except (exceptions.NoCredentialsError, exceptions.PartialCredentialsError):
        raise UserError(f"{flag} {url}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a web identity") from None
    except (exceptions.ConnectionError, exceptions.HTTPClientError) as exc:   # timeouts too
        raise UserError(f"{flag} {url}: cannot reach the S3 endpoint {endpoint} "
                        f"({type(exc).__name__}); check AWS_ENDPOINT_URL_S3 and the "
                        "network") from None
    except exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise UserError(f"{flag} {url}: {_reason(code, status)}") from None


def _reason(code: str, status) -> str:
    if code == "NoSuchBucket":
        return "no such bucket; check the bucket name"
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                "InvalidToken"):
        return (f"the store refused the AWS credentials ({code}); check AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    if code in ("AccessDenied", "403", "Forbidden") or status == 403:
        return "access denied; give these credentials read (and for outputs, write) access"
    return f"the store answered {code or status}; check the URL and the store"

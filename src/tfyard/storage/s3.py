"""The S3 protocol, through boto3 (the `cloud` extra): AWS's own credential chain
(environment, shared files, web identity), region and `AWS_ENDPOINT_URL_S3` /
`AWS_ENDPOINT_URL` for any S3-compatible store. Each failure a user can fix is one line
naming the URL and the fix, never the credentials."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timezone

from tfyard.errors import UserError
from tfyard.storage.location import Location

# A wrong endpoint or a store that is down is named in seconds: a short connect timeout and
# few attempts (botocore's standard mode backs off between them on transient errors).
CONNECT_SECONDS = 5
READ_SECONDS = 60
ATTEMPTS = 4


@dataclass(frozen=True)
class Entry:
    """One object under a prefix: its key relative to the prefix, size and modified time."""

    name: str
    size: int
    modified: float


def client():
    """An S3 client configured by the standard AWS settings, one a process for each set of
    them (a client costs ~0.1 s to make and is safe to share between threads)."""
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    if settings not in _clients:
        _clients[settings] = _new_client()
    return _clients[settings]


_clients: dict = {}


def _new_client():
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise UserError("s3:// paths need the cloud extra: pip install 'tfyard[cloud]'") from None
    return boto3.session.Session().client("s3", config=Config(
        connect_timeout=CONNECT_SECONDS, read_timeout=READ_SECONDS,
        retries={"max_attempts": ATTEMPTS, "mode": "standard"},
        # checksums only where S3 requires them: many S3-compatible stores refuse the rest
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required"))


def endpoint() -> str:
    return (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            or "AWS's own")


@contextlib.contextmanager
def explained(url: Location | str, flag: str):
    """Turn what boto3 raises into one line naming `flag`, `url` and the fix."""
    from botocore import exceptions

    try:
        yield
    except (exceptions.NoCredentialsError, exceptions.PartialCredentialsError):
        raise UserError(f"{flag} {url}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a web identity") from None
    except (exceptions.ConnectionError, exceptions.HTTPClientError) as exc:   # timeouts too
        raise UserError(f"{flag} {url}: cannot reach the S3 endpoint {endpoint()} "
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


def listing(place: Location, flag: str, beginning: str = "") -> Iterator[Entry]:
    """Every object under `place` (a prefix, read as a folder) whose name there starts with
    `beginning`."""
    prefix = f"{place.key}/" if place.key else ""
    s3 = client()
    with explained(place, flag):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=place.bucket,
                                                                 Prefix=prefix + beginning):
            for item in page.get("Contents", []):
                name = item["Key"][len(prefix):]
                if name and not name.endswith("/"):
                    yield Entry(name, item["Size"], item["LastModified"].timestamp())


def download(place: Location, target: str, flag: str, s3=None) -> None:
    """Copy the object `place` into the local file `target`, in one request."""
    with explained(place, flag), open(target, "wb") as handle:
        body = (s3 or client()).get_object(Bucket=place.bucket, Key=place.key)["Body"]
        shutil.copyfileobj(body, handle, 1 << 20)


# What a store answers when a conditional write's condition does not hold: 412, or 409 when
# another conditional write to the key was in flight at the same moment.
_CONDITION_FAILED = ("PreconditionFailed", "ConditionalRequestConflict")


def put(place: Location, body: bytes, flag: str, s3, *, if_absent: bool = False,
        if_match: str | None = None) -> str | None:
    """Store `body` at `place`, only if no object is there (`if_absent`) or only if the one
    there has the ETag `if_match`; its new ETag, or None when the condition did not hold."""
    from botocore.exceptions import ClientError

    condition = {"IfNoneMatch": "*"} if if_absent else {}
    if if_match:
        condition["IfMatch"] = if_match
    with explained(place, flag):
        try:
            return s3.put_object(Bucket=place.bucket, Key=place.key, Body=body,
                                 **condition)["ETag"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _CONDITION_FAILED:
                return None
            raise


@dataclass(frozen=True)
class Head:
    """An object's ETag and its age by the store's own clock (hosts' clocks may differ)."""

    etag: str
    age: float


def head(place: Location, flag: str, s3) -> Head | None:
    """The object at `place`, or None when there is none."""
    from email.utils import parsedate_to_datetime

    from botocore.exceptions import ClientError

    with explained(place, flag):
        try:
            answer = s3.head_object(Bucket=place.bucket, Key=place.key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
    now = parsedate_to_datetime(answer["ResponseMetadata"]["HTTPHeaders"]["date"])
    if now.tzinfo is None:   # HTTP dates are GMT
        now = now.replace(tzinfo=timezone.utc)
    return Head(answer["ETag"], max(0.0, (now - answer["LastModified"]).total_seconds()))


def read(place: Location, flag: str, s3) -> bytes | None:
    """The bytes of the object at `place`, or None when there is none."""
    from botocore.exceptions import ClientError

    with explained(place, flag):
        try:
            return s3.get_object(Bucket=place.bucket, Key=place.key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return None
            raise


def upload(path: str, place: Location, flag: str, s3) -> None:
    """Copy the local file `path` to `place` through one open handle (a file renamed or
    removed meanwhile is still read whole); multipart for large files, each part retried."""
    with open(path, "rb") as handle, explained(place, flag):
        s3.upload_fileobj(handle, place.bucket, place.key)


def delete(place: Location, flag: str, s3) -> None:
    with explained(place, flag):
        s3.delete_object(Bucket=place.bucket, Key=place.key)

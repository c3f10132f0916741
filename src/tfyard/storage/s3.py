"""The S3 protocol, through boto3 (the `cloud` extra): AWS's own credential chain
(environment, shared files, web identity), region and `AWS_ENDPOINT_URL_S3` /
`AWS_ENDPOINT_URL` for any S3-compatible store. Each failure a user can fix is one line
naming the URL and the fix, never the credentials; one the store answers (`Refused`) is told
apart from one it may get over."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from datetime import timezone

from tfyard.errors import UserError
from tfyard.storage import timeouts
from tfyard.storage.location import Location
from tfyard.storage.store import Changed, Entry, Head, Refused

# The settings naming an S3-compatible store's endpoint, the one boto3 takes first
# in order.
ENDPOINTS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


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
        # each try bounded (botocore's standard mode backs off between tries of transient
        # errors), so a wrong endpoint or a silent one is named in seconds
        self.client = boto3.session.Session().client("s3", config=Config(
            connect_timeout=timeouts.connect_seconds(), read_timeout=timeouts.request_seconds(),
            retries={"max_attempts": timeouts.ATTEMPTS, "mode": "standard"},
            # checksums only where S3 requires them: many S3-compatible stores refuse the rest
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required"))

    def where(self) -> str:
        return _endpoint()

    def listing(self, place: Location, flag: str, beginning: str = "") -> Iterator[Entry]:
        prefix = f"{place.key}/" if place.key else ""
        with explained(place, flag):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=place.bucket, Prefix=prefix + beginning):
                for item in page.get("Contents", []):
                    name = item["Key"][len(prefix):]
                    if name and not name.endswith("/"):
                        yield Entry(name, item["Size"], item["LastModified"].timestamp(),
                                    item.get("ETag"))

    def download(self, place: Location, target: str, flag: str,
                 version: str | None = None) -> None:
        from botocore.exceptions import ClientError

        with explained(place, flag), open(target, "wb") as handle:
            try:
                body = self.client.get_object(Bucket=place.bucket, Key=place.key,
                                              **({"IfMatch": version} if version else {}))["Body"]
            except ClientError as exc:
                if version and exc.response.get("Error", {}).get("Code") in (
                        *_CONDITION_FAILED, *_MISSING):
                    raise Changed(flag, place) from None
                raise
            shutil.copyfileobj(body, handle, 1 << 20)

    def put(self, place: Location, body: bytes, flag: str, *, if_absent: bool = False,
            if_match: str | None = None) -> str | None:
        from botocore.exceptions import ClientError

        condition = {"IfNoneMatch": "*"} if if_absent else {}
        if if_match:
            condition["IfMatch"] = if_match
        with explained(place, flag):
            try:
                return self.client.put_object(Bucket=place.bucket, Key=place.key, Body=body,
                                              **condition)["ETag"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _CONDITION_FAILED:
                    return None
                raise

    def head(self, place: Location, flag: str) -> Head | None:
        """The object's age is read by the store's own clock (hosts' clocks may differ). A
        refusal is named as a GET of the object names it: a HEAD's 403 tells wrong
        credentials from too few permissions in no way."""
        from email.utils import parsedate_to_datetime

        from botocore.exceptions import ClientError

        with explained(place, flag):
            try:
                answer = self.client.head_object(Bucket=place.bucket, Key=place.key)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in _MISSING:
                    return None
                if code == "403":   # a HEAD's answer has no body: a GET's names the cause
                    self.client.get_object(Bucket=place.bucket, Key=place.key, Range="bytes=0-0")
                raise
        now = parsedate_to_datetime(answer["ResponseMetadata"]["HTTPHeaders"]["date"])
        if now.tzinfo is None:   # HTTP dates are GMT
            now = now.replace(tzinfo=timezone.utc)
        return Head(answer["ETag"], max(0.0, (now - answer["LastModified"]).total_seconds()))

    def read(self, place: Location, flag: str) -> bytes | None:
        from botocore.exceptions import ClientError

        with explained(place, flag):
            try:
                return self.client.get_object(Bucket=place.bucket, Key=place.key)["Body"].read()
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _MISSING:
                    return None
                raise

    def upload(self, path: str, place: Location, flag: str) -> None:
        """One request for a file under the multipart threshold, from the calling thread
        (boto3's transfer manager would start a pool of threads for each file: a run's
        publisher sends hundreds); multipart for larger ones, each part retried."""
        from boto3.s3.transfer import TransferConfig

        with open(path, "rb") as handle, explained(place, flag):
            if os.fstat(handle.fileno()).st_size < TransferConfig().multipart_threshold:
                self.client.put_object(Bucket=place.bucket, Key=place.key, Body=handle)
            else:
                self.client.upload_fileobj(handle, place.bucket, place.key)

    def delete(self, place: Location, flag: str) -> None:
        with explained(place, flag):
            self.client.delete_object(Bucket=place.bucket, Key=place.key)


# What a store answers when a conditional write's condition does not hold: 412, or 409 when
# another conditional write to the key was in flight at the same moment; and for no object.
_CONDITION_FAILED = ("PreconditionFailed", "ConditionalRequestConflict")
_MISSING = ("404", "NoSuchKey", "NotFound")


@contextlib.contextmanager
def explained(url: Location | str, flag: str):
    """Turn what boto3 raises into one line naming `flag`, `url` and the fix: a `Refused`
    when the store said no, a UserError when it could not be reached."""
    from botocore import exceptions

    try:
        yield
    except (exceptions.NoCredentialsError, exceptions.PartialCredentialsError):
        raise Refused(f"{flag} {url}", "no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                      "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a web identity") from None
    except (exceptions.ConnectTimeoutError, exceptions.ReadTimeoutError):
        raise UserError(f"{flag} {url}: cannot reach the S3 endpoint {_endpoint()}: no answer "
                        f"within {timeouts.request_seconds():g}s, {timeouts.ATTEMPTS} tries; "
                        f"check {_setting()} and the network ({timeouts.REQUEST_ENV} sets the "
                        "wait)") from None
    except (exceptions.ConnectionError, exceptions.HTTPClientError) as exc:
        raise UserError(f"{flag} {url}: cannot reach the S3 endpoint {_endpoint()} "
                        f"({type(exc).__name__}); check {_setting()} and the network") from None
    except exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        reason = _reason(code, status)
        if reason.startswith("the store answered"):   # perhaps passing
            raise UserError(f"{flag} {url}: {reason}") from None
        raise Refused(f"{flag} {url}", reason) from None


def _endpoint() -> str:
    return next((os.environ[name] for name in ENDPOINTS if os.environ.get(name)), "AWS's own")


def _setting() -> str:
    """The endpoint variable the user set (boto3 takes the first of ENDPOINTS set), or both
    when none is: AWS's own endpoint needs neither."""
    return next((name for name in ENDPOINTS if os.environ.get(name)),
                f"{ENDPOINTS[0]} (or {ENDPOINTS[1]}) for a store that is not AWS,")


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

"""Google Cloud Storage, through google-cloud-storage (the `cloud` extra) and its JSON API:
Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's login, the metadata
server) and STORAGE_EMULATOR_HOST for an emulator. Conditional writes are generation
preconditions: ifGenerationMatch=0 creates only, ifGenerationMatch=G replaces only version G.
Each failure a user can fix is one line naming the URL and the fix, never the credentials; one
the store answers (`Refused`) is told apart from one it may get over."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import warnings
from collections.abc import Iterator

from tfyard.errors import UserError
from tfyard.storage import timeouts
from tfyard.storage.location import Location
from tfyard.storage.store import Changed, Entry, Head, Refused


class GcsStore:
    """Buckets of Google Cloud Storage (or an emulator), through one client made at first
    use, so that missing credentials are reported against the URL that needed them."""

    conditions = "generation preconditions (ifGenerationMatch)"

    def __init__(self):
        try:
            with warnings.catch_warnings():   # google.api_core's notice to Python 3.10 users
                warnings.simplefilter("ignore", FutureWarning)
                from google.cloud import storage
                from google.cloud.storage.retry import DEFAULT_RETRY
        except ImportError:
            raise UserError("gs:// paths need the cloud extra: pip install 'tfyard[cloud]'") \
                from None
        self._storage, self._client = storage, None
        self.timeout = (timeouts.connect_seconds(), timeouts.request_seconds())
        self._within = DEFAULT_RETRY.with_deadline(timeouts.request_seconds() * timeouts.ATTEMPTS)

    @property
    def retry(self):
        """A fresh retry for each call: what google-cloud-storage deems transient is tried again,
        ATTEMPTS tries in all within their time. The deadline alone let an endpoint that refuses
        at once be tried again for its whole length (up to 45 s), not in seconds."""
        transient, tries = self._within._predicate, itertools.count(2)   # no public getter
        return self._within.with_predicate(
            lambda exc: transient(exc) and next(tries) <= timeouts.ATTEMPTS)

    def where(self) -> str:
        return os.environ.get("STORAGE_EMULATOR_HOST") or "Google's own"

    @property
    def client(self):
        if self._client is None:
            self._client = self._storage.Client()
        return self._client

    def _blob(self, place: Location):
        return self.client.bucket(place.bucket).blob(place.key)

    def listing(self, place: Location, flag: str, beginning: str = "") -> Iterator[Entry]:
        prefix = f"{place.key}/" if place.key else ""
        with explained(place, flag, self.where()):
            for blob in self.client.list_blobs(place.bucket, prefix=prefix + beginning,
                                                timeout=self.timeout, retry=self.retry):
                name = blob.name[len(prefix):]
                if name and not name.endswith("/"):
                    yield Entry(name, blob.size, blob.updated.timestamp(),
                                str(blob.generation))

    def download(self, place: Location, target: str, flag: str,
                 version: str | None = None) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with explained(place, flag, self.where()), open(target, "wb") as handle:
            try:
                self._blob(place).download_to_file(
                    handle, if_generation_match=int(version) if version else None,
                    timeout=self.timeout, retry=self.retry)
            except (PreconditionFailed, NotFound):
                if version:
                    raise Changed(flag, place) from None
                raise

    def put(self, place: Location, body: bytes, flag: str, *, if_absent: bool = False,
            if_match: str | None = None) -> str | None:
        from google.api_core.exceptions import PreconditionFailed

        generation = 0 if if_absent else (int(if_match) if if_match else None)
        with explained(place, flag, self.where()):
            blob = self._blob(place)
            try:   # a conditional write is idempotent, so retried like any other
                blob.upload_from_string(body, if_generation_match=generation,
                                        timeout=self.timeout, retry=self.retry)
            except PreconditionFailed:
                return None
        return str(blob.generation)

    def head(self, place: Location, flag: str) -> Head | None:
        """The age is read from the object's update time by this host's clock: the JSON API
        gives the client no clock of its own, and hosts that share a bucket keep NTP time."""
        with explained(place, flag, self.where()):
            blob = self.client.bucket(place.bucket).get_blob(place.key, timeout=self.timeout,
                                                             retry=self.retry)
        if blob is None:
            return None
        return Head(str(blob.generation), max(0.0, time.time() - blob.updated.timestamp()))

    def read(self, place: Location, flag: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        with explained(place, flag, self.where()):
            try:
                return self._blob(place).download_as_bytes(timeout=self.timeout, retry=self.retry)
            except NotFound:
                return None

    def upload(self, path: str, place: Location, flag: str) -> None:
        """Resumable for large files, each chunk retried."""
        with open(path, "rb") as handle, explained(place, flag, self.where()):
            self._blob(place).upload_from_file(handle, timeout=self.timeout, retry=self.retry)

    def delete(self, place: Location, flag: str) -> None:
        from google.api_core.exceptions import NotFound

        with explained(place, flag, self.where()), contextlib.suppress(NotFound):
            self._blob(place).delete(timeout=self.timeout, retry=self.retry)


@contextlib.contextmanager
def explained(url: Location | str, flag: str, endpoint: str):
    """Turn what google-cloud-storage raises into one line naming `flag`, `url` and the fix."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth
    from requests import exceptions as http

    try:
        yield
    except auth.DefaultCredentialsError:
        raise Refused(f"{flag} {url}", "no Google credentials found; set "
                      "GOOGLE_APPLICATION_CREDENTIALS to a key file, or run gcloud auth "
                      "application-default login") from None
    except (auth.RefreshError, exceptions.Unauthorized):
        raise Refused(f"{flag} {url}", "the store refused the Google credentials; check "
                      "GOOGLE_APPLICATION_CREDENTIALS or log in again") from None
    except (auth.TransportError, http.ConnectionError, http.Timeout, exceptions.RetryError):
        setting = "STORAGE_EMULATOR_HOST and " if os.environ.get("STORAGE_EMULATOR_HOST") else ""
        raise UserError(f"{flag} {url}: cannot reach the GCS endpoint {endpoint} within "
                        f"{timeouts.request_seconds():g}s, {timeouts.ATTEMPTS} tries; check "
                        f"{setting}the network ({timeouts.REQUEST_ENV} sets the wait)") from None
    except exceptions.NotFound:
        raise Refused(f"{flag} {url}", "no such bucket or object; check the URL") from None
    except exceptions.Forbidden:
        raise Refused(f"{flag} {url}", "access denied; give these credentials read (and for "
                      "outputs, write) access") from None
    except exceptions.GoogleAPICallError as exc:
        raise UserError(f"{flag} {url}: the store answered {exc.code}; check the URL and the "
                        "store") from None

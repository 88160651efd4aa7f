"""Who gets a request in: basic auth, request limits, rate limit, configured headers, HEAD.

One pure-ASGI middleware in front of the whole app, so that no endpoint escapes it (metrics,
JSON, page, API docs, 404s), in this order:

1. the web config's ``rate_limit`` (token bucket over all requests): 429;
2. ``basic_auth_users``: 401 with ``WWW-Authenticate`` unless the credentials match (paths
   in ``unauthenticated_paths`` excepted). Verified credentials are cached (a digest of user,
   password and hash), so a scraper pays bcrypt once, not per scrape; unknown users are
   refused without bcrypt; at most ``BCRYPT_THREADS`` checks run at once and at most
   ``BCRYPT_QUEUE`` wait, beyond that 503 at once (a wrong-password flood costs bounded CPU);
3. a per-class request gate: more than the class's limit in flight gets 503 at once. Classes
   keep a flood on one endpoint from starving another: ``metrics`` (the telemetry path),
   ``probes`` (``/healthz``, ``/readyz``) and ``other`` (JSON, page, docs, anything else);
4. HEAD is served as GET without the body (FastAPI routes only answer GET).

The web config's ``http_server_config.headers`` go on every response, refusals included.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from exporter.web.webconfig import WebConfig

__all__ = ["AccessMiddleware", "BasicAuth", "RequestLimits"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

BCRYPT_THREADS = 2
BCRYPT_QUEUE = 8
CACHE_SIZE = 64
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
PROBE_LIMIT = 8
#: What sets each class's limit, for the 503's text.
_LIMIT_SOURCE = {"metrics": "--web.max-requests", "other": "--web.max-other-requests",
                 "probes": "probe limit"}
REALM = 'Basic realm="gpu-exporter", charset="UTF-8"'


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Most requests in flight per class (0: no limit)."""

    metrics_path: str
    metrics: int
    other: int
    probes: int = PROBE_LIMIT

    def classify(self, path: str) -> str:
        """The class of a request path."""
        if path == self.metrics_path:
            return "metrics"
        return "probes" if path in PROBE_PATHS else "other"

    def limit(self, name: str) -> int:
        """The limit of class ``name``."""
        return {"metrics": self.metrics, "probes": self.probes}.get(name, self.other)


class BasicAuth:
    """Checks ``Authorization: Basic`` against bcrypt hashes, caching successes."""

    def __init__(self) -> None:
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._limiter = anyio.CapacityLimiter(BCRYPT_THREADS)
        self._waiting = 0
        self.bcrypt_checks = 0

    @staticmethod
    def _credentials(header: bytes | None) -> tuple[str, bytes] | None:
        if not header or header[:6].lower() != b"basic ":
            return None
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        user, sep, password = decoded.partition(b":")
        if not sep:
            return None
        try:
            return user.decode("utf-8"), password
        except UnicodeDecodeError:
            return None

    async def check(self, config: WebConfig, header: bytes | None) -> bool | None:
        """True: let in; False: 401; None: too many checks waiting (503)."""
        credentials = self._credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        hashed = config.users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(b"\0".join(
            (config.fingerprint.encode(), user.encode(), password))).digest()
        if key in self._verified:
            self._verified.move_to_end(key)
            return True
        if self._waiting >= BCRYPT_QUEUE + BCRYPT_THREADS:
            return None
        self._waiting += 1
        try:
            self.bcrypt_checks += 1
            ok = await anyio.to_thread.run_sync(_bcrypt_matches, password, hashed,
                                                limiter=self._limiter)
        finally:
            self._waiting -= 1
        if ok:
            self._verified[key] = None
            while len(self._verified) > CACHE_SIZE:
                self._verified.popitem(last=False)
        return ok


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    # Imported on the first check: without basic_auth_users it would be 0.35 MB resident for
    # nothing (bench/bench_memory.py).
    import bcrypt  # noqa: PLC0415

    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # over 72 bytes, a NUL byte: bcrypt refuses, so the password is wrong
        return False


class _TokenBucket:
    def __init__(self, interval: float, burst: int, clock: Callable[[], float]) -> None:
        self.interval, self.burst, self._clock = interval, burst, clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) / self.interval)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class AccessMiddleware:
    """The admission middleware (see the module docstring)."""

    def __init__(
        self, app: App, *, limits: RequestLimits, web_config: Callable[[], WebConfig],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``web_config`` returns the config in force now (it may reload between calls)."""
        self.app = app
        self.limits = limits
        self.web_config = web_config
        self.auth = BasicAuth()
        self.in_flight: dict[str, int] = {"metrics": 0, "probes": 0, "other": 0}
        self.refused: dict[int, int] = {401: 0, 429: 0, 503: 0}
        self._clock = clock
        self._bucket: _TokenBucket | None = None
        self._bucket_for: object = None

    def _rate_limited(self, config: WebConfig) -> bool:
        if config.rate_limit is None:
            return False
        if self._bucket_for != config.rate_limit:
            self._bucket_for = config.rate_limit
            self._bucket = _TokenBucket(config.rate_limit.interval_seconds,
                                        config.rate_limit.burst, self._clock)
        assert self._bucket is not None
        return not self._bucket.take()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        config = self.web_config()
        send = _with_headers(send, config.headers) if config.headers else send
        if self._rate_limited(config):
            await self._refuse(send, 429, "rate limit exceeded; retry later\n",
                               (b"retry-after", b"1"))
            return
        path = scope.get("path", "")
        if config.users and path not in config.unauthenticated_paths:
            header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
            verdict = await self.auth.check(config, header)
            if verdict is None:
                await self._refuse(send, 503, "too many authentication checks; retry later\n",
                                   (b"retry-after", b"1"))
                return
            if not verdict:
                await self._refuse(send, 401, "unauthorized\n",
                                   (b"www-authenticate", REALM.encode()))
                return
        name = self.limits.classify(path)
        limit = self.limits.limit(name)
        if limit and self.in_flight[name] >= limit:
            await self._refuse(send, 503, f"too many concurrent requests "
                               f"({_LIMIT_SOURCE[name]}={limit}); retry later\n",
                               (b"retry-after", b"1"))
            return
        self.in_flight[name] += 1
        try:
            if scope.get("method") == "HEAD":
                await self.app({**scope, "method": "GET"}, receive, _without_body(send))
            else:
                await self.app(scope, receive, send)
        finally:
            self.in_flight[name] -= 1

    async def _refuse(self, send: Send, status: int, text: str,
                      *extra: tuple[bytes, bytes]) -> None:
        self.refused[status] = self.refused.get(status, 0) + 1
        body = text.encode()
        await send({
            "type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                        (b"cache-control", b"no-store"), *extra],
        })
        await send({"type": "http.response.body", "body": body})


def _with_headers(send: Send, headers: tuple[tuple[str, str], ...]) -> Send:
    encoded = [(k.lower().encode("ascii"), v.encode("utf-8")) for k, v in headers]  # as Go
    names = {k for k, _ in encoded}

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in names]
            message = {**message, "headers": kept + encoded}
        await send(message)

    return wrapped


def _without_body(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return wrapped

"""Response bodies in pieces, so that a client that does not read stops the producer.

uvicorn writes a body handed to it in one piece into the transport's buffer at once: a
client that asked for a 5 MB snapshot and never read it held 5 MB of the exporter's memory
per connection. Split into ``CHUNK_BYTES`` pieces, each piece waits until the previous ones
drained below asyncio's high-water mark (uvicorn's ``send`` drains first), so a connection
holds at most about two pieces, and the handler waits (inside its request gate) instead of
buffering; ``exporter.web.connections`` aborts a connection whose output does not drain.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["CHUNK_BYTES", "ChunkedBodies"]

#: Largest piece of a body written at once (asyncio's default high-water mark).
CHUNK_BYTES = 64 * 1024

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]], Send],
                   Awaitable[None]]


class ChunkedBodies:
    """ASGI middleware: every ``http.response.body`` over ``CHUNK_BYTES`` goes out in pieces."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any],
                       receive: Callable[[], Awaitable[Message]], send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_in_pieces(message: Message) -> None:
            body = message.get("body", b"")
            if message["type"] != "http.response.body" or len(body) <= CHUNK_BYTES:
                await send(message)
                return
            more = message.get("more_body", False)
            for start in range(0, len(body), CHUNK_BYTES):
                end = start + CHUNK_BYTES
                await send({"type": "http.response.body", "body": body[start:end],
                            "more_body": more or end < len(body)})

        await self.app(scope, receive, send_in_pieces)

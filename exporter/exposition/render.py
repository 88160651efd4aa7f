"""``/metrics`` bodies: content negotiation, gzip, and a per-snapshot render cache.

A snapshot is immutable, so its per-GPU/per-process text is rendered once per
(snapshot, options, content type) and reused; only the small self-metrics part (data age,
error counters, ``process_*``) is rendered on every scrape and appended. The cached part is
what the negotiated prometheus_client encoder writes for the snapshot families (produced by
``encode.FastEncoder``, byte-identical) without OpenMetrics' closing ``# EOF``; the fresh part
is the encoder's own output for the self families, which ends with the one ``# EOF``. The two
parts never share a family name, so the body equals encoding everything in one registry.

gzip reuses the work too: the cached part is fed once into a zlib stream whose state is
kept unflushed; each scrape copies that state, adds the fresh part and flushes, which yields
one ordinary gzip member.

Only the latest snapshot is cached (bounded memory); the cache is guarded by a lock because
scrapes run in a threadpool.
"""

from __future__ import annotations

import itertools
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.exposition import gzip_accepted as _gzip_accepted

from exporter.exposition.collector import snapshot_families
from exporter.exposition.encode import Encoder, Families, FastEncoder
from exporter.exposition.families import Family, FamilyData
from exporter.exposition.self_metrics import self_families
from exporter.snapshot import Snapshot
from exporter.state import ExporterState, ExpositionOptions

__all__ = ["MetricsRenderer", "gzip_accepted", "negotiate"]

_OPENMETRICS = "application/openmetrics-text"
#: Distinct content types cached per snapshot; beyond that (odd Accept headers) bodies are
#: rendered uncached so a client cannot grow the cache.
MAX_CACHED_FORMATS = 8


def negotiate(accept: str | None) -> tuple[Encoder, str]:
    """The prometheus_client encoder and Content-Type for an ``Accept`` header.

    Text 0.0.4 unless OpenMetrics (or text >= 1.0.0) is asked for. A header that
    prometheus_client cannot parse (for example ``version=abc``) gets text 0.0.4, as any
    unknown media type does; nothing is raised.
    """
    try:
        return choose_encoder(accept or "")
    except (TypeError, ValueError):  # non-numeric version compared with a tuple of ints
        return generate_latest, CONTENT_TYPE_PLAIN_0_0_4


def gzip_accepted(accept_encoding: str | None) -> bool:
    """True when the ``Accept-Encoding`` header lists gzip."""
    return _gzip_accepted(accept_encoding or "")


@dataclass(slots=True)
class _Body:
    """The cached snapshot part of one content type."""

    prefix: bytes  # encoded snapshot families, without OpenMetrics' final ``# EOF``
    gzip_prefix: bytes | None = None  # compressed bytes emitted so far for ``prefix``
    gzip_state: zlib._Compress | None = None  # the unflushed stream after ``prefix``


@dataclass(slots=True)
class _Entry:
    snapshot: Snapshot  # held so that identity comparison stays valid
    options: ExpositionOptions
    families: list[FamilyData]
    bodies: dict[str, _Body] = field(default_factory=dict)


class MetricsRenderer:
    """Renders ``/metrics`` for a state; keeps the latest snapshot's rendering cached.

    One instance per app, shared by all scrape threads.
    """

    def __init__(self, *, process_metrics: bool = True, gzip_level: int = 3) -> None:
        """``process_metrics`` adds prometheus_client's ``process_*`` families.

        Raises:
            ValueError: ``gzip_level`` is not within 0..9.
        """
        if not 0 <= gzip_level <= 9:
            raise ValueError(f"gzip_level must be within 0..9, got {gzip_level}")
        self._process = ProcessCollector(registry=None) if process_metrics else None
        self._gzip_level = gzip_level
        self._lock = threading.Lock()
        self._entry: _Entry | None = None
        self._encoders: dict[str, FastEncoder] = {}

    def render(
        self,
        state: ExporterState,
        options: ExpositionOptions,
        accept: str | None = None,
        accept_encoding: str | None = None,
    ) -> tuple[bytes, dict[str, str]]:
        """The response body and headers for one scrape.

        Headers: ``Content-Type`` (negotiated from ``accept``), ``Vary``, and
        ``Content-Encoding: gzip`` when ``accept_encoding`` lists gzip (the body is then
        compressed). Odd headers fall back to text 0.0.4 / identity; nothing is raised for
        them. Errors in building families (a bug) propagate.
        """
        encoder, content_type = negotiate(accept)
        use_gzip = gzip_accepted(accept_encoding)
        fresh = self._fresh_part(encoder, state)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
        with self._lock:
            body = self._body(state.snapshot, options, encoder, content_type)
            if not use_gzip:
                return body.prefix + fresh, headers
            stream = self._gzip_stream(body).copy()
            prefix = body.gzip_prefix or b""
        headers["Content-Encoding"] = "gzip"
        return prefix + stream.compress(fresh) + stream.flush(), headers

    def warm(self, state: ExporterState, options: ExpositionOptions) -> None:
        """Pre-render text 0.0.4 and OpenMetrics 1.0.0 (plain and gzip) for a new snapshot.

        Optional: call it from the collecting thread right after a collection so that the
        first scrape of the new snapshot is as fast as the rest (with scrape-driven collection
        the scrape waits for the collection anyway, so it gains nothing there).
        """
        for accept in (None, _OPENMETRICS):
            encoder, content_type = negotiate(accept)
            with self._lock:
                self._gzip_stream(self._body(state.snapshot, options, encoder, content_type))

    def _fresh_part(self, encoder: Encoder, state: ExporterState) -> bytes:
        families: Iterator[Family] = (data.to_family() for data in self_families(state))
        if self._process is not None:
            families = itertools.chain(families, self._process.collect())
        # For OpenMetrics this part carries the body's single closing ``# EOF``.
        return encoder(Families(list(families)))

    def _fast_encoder(self, encoder: Encoder, content_type: str) -> FastEncoder:
        """The template cache of one format (caller holds the lock)."""
        fast = self._encoders.get(content_type)
        if fast is None:
            fast = FastEncoder(encoder, content_type.startswith(_OPENMETRICS))
            if len(self._encoders) < MAX_CACHED_FORMATS:
                self._encoders[content_type] = fast
        return fast

    def _body(
        self,
        snapshot: Snapshot,
        options: ExpositionOptions,
        encoder: Encoder,
        content_type: str,
    ) -> _Body:
        """The cached snapshot part (caller holds the lock)."""
        entry = self._entry
        if entry is None or entry.snapshot is not snapshot or entry.options != options:
            # A new snapshot replaces the old one: exited processes vanish at once.
            families = snapshot_families(snapshot, options)
            entry = self._entry = _Entry(snapshot, options, families)
        body = entry.bodies.get(content_type)
        if body is not None:
            return body
        fast = self._fast_encoder(encoder, content_type)
        body = _Body(fast.encode(entry.families).encode("utf-8"))
        if len(entry.bodies) < MAX_CACHED_FORMATS:
            entry.bodies[content_type] = body
        return body

    def _gzip_stream(self, body: _Body) -> zlib._Compress:
        """The unflushed gzip stream after ``body.prefix`` (caller holds the lock)."""
        if body.gzip_state is None:
            stream = zlib.compressobj(self._gzip_level, zlib.DEFLATED, 31)  # 31: gzip wrapper
            body.gzip_prefix = stream.compress(body.prefix)
            body.gzip_state = stream
        return body.gzip_state

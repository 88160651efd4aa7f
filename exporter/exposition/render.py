"""``/metrics`` bodies: content negotiation, gzip, and a per-snapshot render cache.

A snapshot is immutable, so its per-GPU/per-process text is rendered once per
(snapshot, options, content type) and reused; only the small self-metrics part (data age,
error counters, ``process_*``) is rendered on every scrape and appended. The cached part is
what the negotiated prometheus_client encoder writes for the snapshot families (produced by
``encode.Encoder``, byte-identical) without OpenMetrics' closing ``# EOF``; the fresh part
is the self families (through a second ``Encoder``) followed by the encoder's own output
for ``process_*``, which ends with the one ``# EOF``. No two parts share a family name, so
the body equals encoding everything in one registry.

gzip reuses the work too, down to single families: each family's text of the cached part
is deflated on its own and ended with a full flush (byte-aligned, no reference to earlier
data), so its compressed chunk can be spliced into any later body; the chunks of families
whose text is unchanged from the previous snapshot (the encoder hands back the same
``str``) are reused. Each scrape appends the fresh part, the final block and the CRC-32/size
trailer: one ordinary gzip member, whatever ``gzip.decompress`` or any inflater accepts. Of
the fresh part, ``process_*`` (read at most once a second) is deflated when read and the
chunk reused; the self families (~1.5 KB) go in stored (uncompressed) blocks: deflating them
on every scrape cost ~20-40 us, a tenth of the event loop's time per answer in a flood of
scrapes (py-spy, ``bench/bench_load.py``), for ~1 KB fewer bytes. (Families compressed apart
lose some cross-family matches: ~25 % more bytes than deflating the body in one go.)

Only the latest snapshot is cached (bounded memory); the cache is guarded by a lock because
scrapes run in a threadpool.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.exposition import gzip_accepted as _gzip_accepted
from prometheus_client.metrics_core import Metric

from exporter.exposition.collector import snapshot_families
from exporter.exposition.encode import EOF, Encoder
from exporter.exposition.families import FamilyData
from exporter.exposition.self_metrics import self_families
from exporter.snapshot import Snapshot
from exporter.state import ExporterState, ExpositionOptions

__all__ = ["MetricsRenderer", "gzip_accepted", "negotiate"]

#: A prometheus_client encoder (``generate_latest`` and friends): anything with collect().
ClientEncoder = Callable[..., bytes]


class _Families:
    """A minimal registry stand-in: prometheus_client's encoders only call ``collect()``."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
#: Distinct content types cached per snapshot; beyond that (odd Accept headers) bodies are
#: rendered uncached so a client cannot grow the cache.
MAX_CACHED_FORMATS = 8
#: Seconds the exporter's own process_* figures (CPU, memory, open files) are reused.
PROCESS_METRICS_TTL = 1.0
#: The final deflate block, empty (fixed Huffman codes): what ``flush()`` writes after a full
#: flush.
_FINAL_BLOCK = b"\x03\x00"
#: Most bytes in one stored deflate block.
_STORED_MAX = 0xFFFF


def stored_blocks(data: bytes) -> bytes:
    """``data`` as non-final stored deflate blocks (byte-aligned, no compression)."""
    out = []
    for start in range(0, len(data), _STORED_MAX):
        piece = data[start:start + _STORED_MAX]
        out.append(struct.pack("<BHH", 0, len(piece), len(piece) ^ 0xFFFF))
        out.append(piece)
    return b"".join(out)


def negotiate(accept: str | None) -> tuple[ClientEncoder, str]:
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


@dataclass(frozen=True, slots=True)
class _Part:
    """A fresh-part text and its deflated, full-flushed chunk."""

    text: bytes
    deflated: bytes


_NO_PART = _Part(b"", b"")


@dataclass(slots=True)
class _Body:
    """The cached snapshot part of one content type (without OpenMetrics' final ``# EOF``).

    A gzip scrape never joins the parts: on a fresh 8x32 snapshot the joined text and its
    bytes were two ~240 KB blocks, above glibc's mmap threshold (``exporter.memory``), so
    each was mapped, faulted in page by page and unmapped again: ~120 page faults a render.
    """

    parts: list[str]  # one text per snapshot family (from ``Encoder.encode_parts``)
    joined: bytes | None = None  # the parts encoded and joined (identity responses)
    gzip_chunks: bytes | None = None  # raw deflate of the parts, full-flushed per family
    crc: int = 0  # CRC-32 of the parts encoded (set with ``gzip_chunks``)
    size: int = 0  # bytes of the parts encoded (set with ``gzip_chunks``)

    def text(self) -> bytes:
        """The parts encoded and joined (built once; caller holds the renderer's lock)."""
        if self.joined is None:
            self.joined = "".join(self.parts).encode("utf-8")
        return self.joined


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

    def __init__(self, *, process_metrics: bool = True, gzip_level: int = 3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``process_metrics`` adds prometheus_client's ``process_*`` families.

        Raises:
            ValueError: ``gzip_level`` is not within 0..9.
        """
        if not 0 <= gzip_level <= 9:
            raise ValueError(f"gzip_level must be within 0..9, got {gzip_level}")
        self._process = ProcessCollector(registry=None) if process_metrics else None
        self._clock = clock
        # Encoded process_* families by content type: (clock when read, part).
        self._process_parts: dict[str, tuple[float, _Part]] = {}
        self._gzip_level = gzip_level
        # The 10-byte header zlib writes for this level (mtime 0, its OS code).
        self._gzip_header = zlib.compressobj(gzip_level, zlib.DEFLATED, 31).flush()[:10]
        # Family texts of the last gzip body built: id(text) -> (text, its bytes, its chunk).
        self._chunks: dict[int, tuple[str, bytes, bytes]] = {}
        self._lock = threading.Lock()
        self._entry: _Entry | None = None
        self._encoders: dict[str, Encoder] = {}
        # Self metrics get their own encoders: each keeps only its last call's lines.
        self._self_encoders: dict[str, Encoder] = {}

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
        rendered = self._render(state, options, accept, accept_encoding, cached_only=False)
        assert rendered is not None
        return rendered

    def render_cached(
        self, state: ExporterState, options: ExpositionOptions, accept: str | None,
        accept_encoding: str | None,
    ) -> tuple[bytes, dict[str, str]] | None:
        """As ``render``, but None unless the snapshot's part is cached in that format.

        Cheap enough (the fresh part only) for the event loop.
        """
        return self._render(state, options, accept, accept_encoding, cached_only=True)

    def _render(
        self, state: ExporterState, options: ExpositionOptions, accept: str | None,
        accept_encoding: str | None, *, cached_only: bool,
    ) -> tuple[bytes, dict[str, str]] | None:
        encoder, content_type = negotiate(accept)
        use_gzip = gzip_accepted(accept_encoding)
        own, process = self._fresh_parts(encoder, content_type, state)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
        with self._lock:
            body = self._cached_body(state.snapshot, options, content_type)
            if body is None or (use_gzip and body.gzip_chunks is None):
                if cached_only:
                    return None
                body = body or self._body(state.snapshot, options, content_type)
            if not use_gzip:
                return b"".join((body.text(), own, process.text)), headers
            chunks = self._gzip_chunks(body)
        headers["Content-Encoding"] = "gzip"
        crc = zlib.crc32(process.text, zlib.crc32(own, body.crc))
        size = body.size + len(own) + len(process.text)
        return b"".join((self._gzip_header, chunks, stored_blocks(own), process.deflated,
                         _FINAL_BLOCK, struct.pack("<II", crc, size & 0xFFFFFFFF))), headers

    def _fresh_parts(self, client_encoder: ClientEncoder, content_type: str,
                     state: ExporterState) -> tuple[bytes, _Part]:
        """The self families and ``process_*``; together they end with OpenMetrics' ``# EOF``."""
        encoder = self._self_encoders.get(content_type)
        if encoder is None:  # two racing scrapes may both build one: harmless
            encoder = Encoder(content_type)
            if len(self._self_encoders) < MAX_CACHED_FORMATS:
                self._self_encoders[content_type] = encoder
        text = encoder.encode(self_families(state))
        if self._process is not None:
            return text.encode("utf-8"), self._process_part(client_encoder, content_type)
        return (text + EOF if encoder.openmetrics else text).encode("utf-8"), _NO_PART

    def _process_part(self, client_encoder: ClientEncoder, content_type: str) -> _Part:
        """The ``process_*`` families, read at most once per ``PROCESS_METRICS_TTL``.

        Reading them (``/proc/self/stat``, ``status``, ``limits``, a listing of
        ``/proc/self/fd``) was a quarter of the event loop's time under a flood of scrapes.
        prometheus_client writes process_* and the body's one closing ``# EOF``.
        """
        assert self._process is not None
        now = self._clock()
        cached = self._process_parts.get(content_type)
        if cached is not None and now - cached[0] < PROCESS_METRICS_TTL:
            return cached[1]
        text = client_encoder(_Families(list(self._process.collect())))
        stream = zlib.compressobj(self._gzip_level, zlib.DEFLATED, -15)
        part = _Part(text, stream.compress(text) + stream.flush(zlib.Z_FULL_FLUSH))
        if cached is not None or len(self._process_parts) < MAX_CACHED_FORMATS:
            self._process_parts[content_type] = (now, part)
        return part

    def _encoder(self, content_type: str) -> Encoder:
        """The snapshot-part encoder of one format (caller holds the lock)."""
        encoder = self._encoders.get(content_type)
        if encoder is None:
            encoder = Encoder(content_type)
            if len(self._encoders) < MAX_CACHED_FORMATS:
                self._encoders[content_type] = encoder
        return encoder

    def _cached_body(self, snapshot: Snapshot, options: ExpositionOptions,
                     content_type: str) -> _Body | None:
        """The snapshot part if cached (caller holds the lock)."""
        entry = self._current(snapshot, options)
        return None if entry is None else entry.bodies.get(content_type)

    def _current(self, snapshot: Snapshot, options: ExpositionOptions) -> _Entry | None:
        """The cache entry if it holds ``snapshot`` rendered with ``options``."""
        entry = self._entry
        if entry is None or entry.snapshot is not snapshot or entry.options != options:
            return None
        return entry

    def _body(self, snapshot: Snapshot, options: ExpositionOptions, content_type: str) -> _Body:
        """The snapshot part, rendered and cached if it is not (caller holds the lock)."""
        entry = self._current(snapshot, options)
        if entry is None:
            # A new snapshot replaces the old one: exited processes vanish at once.
            families = snapshot_families(snapshot, options)
            entry = self._entry = _Entry(snapshot, options, families)
        body = entry.bodies.get(content_type)
        if body is not None:
            return body
        parts = self._encoder(content_type).encode_parts(entry.families)
        body = _Body(parts)
        if len(entry.bodies) < MAX_CACHED_FORMATS:
            entry.bodies[content_type] = body
        return body

    def _gzip_chunks(self, body: _Body) -> bytes:
        """The deflated, full-flushed chunks of ``body.parts``; sets ``body.crc`` and
        ``body.size`` (caller holds the lock)."""
        if body.gzip_chunks is not None:
            return body.gzip_chunks
        previous, current = self._chunks, {}
        stream: zlib._Compress | None = None
        out: list[bytes] = []
        crc = size = 0
        for part in body.parts:
            found = previous.get(id(part))
            if found is None or found[0] is not part:  # a new text: deflate it
                if stream is None:
                    stream = zlib.compressobj(self._gzip_level, zlib.DEFLATED, -15)
                data = part.encode("utf-8")
                # A full flush resets the stream: the chunk stands on its own.
                found = (part, data, stream.compress(data) + stream.flush(zlib.Z_FULL_FLUSH))
            current[id(part)] = found
            crc = zlib.crc32(found[1], crc)
            size += len(found[1])
            out.append(found[2])
        self._chunks = current  # only the latest body's chunks: bounded memory
        body.crc, body.size = crc, size
        body.gzip_chunks = b"".join(out)
        return body.gzip_chunks

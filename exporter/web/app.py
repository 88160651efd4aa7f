"""The HTTP app (FastAPI on one uvicorn worker).

Routes: ``<telemetry path>`` (exact, default ``/metrics``), ``/healthz``, ``/readyz``,
``/api/v1/snapshot`` (typed JSON, in ``/openapi.json`` and ``/docs``) and ``/`` (landing page).
Scheduler waits and rendering run in the threadpool so the event loop never blocks; a hung
collection therefore costs a pool thread for at most the collection timeout. The exceptions
cost microseconds: a scrape of fresh data whose snapshot part is rendered already, and one
beyond ``--web.max-requests``, are answered on the event loop.

``/metrics`` answers ``Server-Timing: state;dur=..,render;dur=..,total;dur=..`` (milliseconds,
measured in the handler) so that benchmarks can read server-side latency. It starts with
``cached`` for a scrape answered at once on the event loop (fresh data, its snapshot part
rendered already), with ``latest`` for one beyond ``--web.max-requests`` answered at once with
the last collected data; other scrapes waited for a collection (or rendered) in a thread.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from pydantic import Field, TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from exporter import __version__
from exporter.config import Config
from exporter.exposition.render import MetricsRenderer
from exporter.scheduler import Scheduler
from exporter.state import ExporterState

__all__ = ["REFRESH_PARAMETER", "SCRAPE_TIMEOUT_HEADER", "Telemetry", "create_app",
           "refresh_seconds", "scrape_timeout"]

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
#: Longest /readyz waits for a collection (kubelet probes time out after 1 s by default).
READY_WAIT_SECONDS = 0.8
_NO_STORE = {"Cache-Control": "no-store"}
_TIMEOUT_HEADER_NAME = SCRAPE_TIMEOUT_HEADER.lower().encode("latin-1")
#: Headers of every /metrics answer besides the renderer's.
_METRICS_HEADERS = [(b"cache-control", b"no-store")]
_PAGE_HEADERS = {
    **_NO_STORE,
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def scrape_timeout(header: str | None, offset: float) -> float | None:
    """How long a scrape may wait for a collection, from Prometheus' timeout header.

    ``header`` minus ``offset``; when the offset would eat more than half the scrape timeout,
    half of it. None for a missing or unusable header (the scheduler's own timeout applies):
    an odd header from a proxy must not fail the scrape.
    """
    if header is None:
        return None
    try:
        value = float(header)
    except ValueError:
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return value - offset if value > 2 * offset else value / 2


#: The landing page's ``?refresh=N`` as /openapi.json describes it.
REFRESH_PARAMETER = {
    "name": "refresh", "in": "query", "required": False,
    "description": "Reload every N seconds (0: never).",
    "schema": {"type": "integer", "maximum": 3600, "minimum": 0, "default": 0, "title": "Refresh",
               "description": "Reload every N seconds (0: never)."},
}


@functools.cache
def _refresh_adapter() -> TypeAdapter[int]:
    return TypeAdapter(Annotated[int, Field(ge=0, le=3600)])


def refresh_seconds(query: Mapping[str, str]) -> int:
    """``?refresh=`` validated as FastAPI validates ``Query(0, ge=0, le=3600)`` (same 422).

    Read here rather than declared as a parameter: FastAPI's parameter analysis imports
    ``pydantic.v1`` at start (0.9 MB resident, ``bench/bench_memory.py``), for one query
    parameter of a page a scrape never asks for.

    Raises:
        RequestValidationError: not an integer within 0..3600 (FastAPI answers 422).
    """
    value = query.get("refresh")
    if value is None:
        return 0
    try:
        return _refresh_adapter().validate_python(value)
    except ValidationError as exc:
        raise RequestValidationError([
            {**error, "loc": ("query", "refresh", *error["loc"])}
            for error in exc.errors(include_url=False)
        ]) from None


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(slots=True)
class Telemetry:
    """The telemetry path: its plain ASGI handler and the scrapes waiting in the threadpool."""

    path: str
    serve: ASGIApp
    waiting: int = 0  # scrapes waiting for a collection in a thread (event loop only)


class _ExporterApp(FastAPI):
    """FastAPI answering a GET (or HEAD) of the telemetry path before anything of its own.

    FastAPI's per-request telemetry check, its seven middleware layers and its routing cost
    ~15 % of the event loop's time per answer under a flood of scrapes
    (``bench/bench_load.py``). An exception in the telemetry app reaches uvicorn, which logs
    it and answers 500, as FastAPI's error middleware would. Other methods go through
    FastAPI's routing (405).
    """

    telemetry: Telemetry | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        telemetry = self.telemetry
        if (telemetry is not None and scope["type"] == "http" and scope["path"] == telemetry.path
                and scope["method"] in ("GET", "HEAD")):
            await telemetry.serve(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def _snapshot_model() -> type[Any]:
    from exporter.exposition.json_model import SnapshotResponse  # noqa: PLC0415

    return SnapshotResponse


def create_app(
    config: Config,
    scheduler: Scheduler,
    *,
    renderer: MetricsRenderer | None = None,
) -> FastAPI:
    """Build the app serving ``scheduler``'s state under ``config``."""
    options = config.exposition_options()
    # gzip level 1: ~1 ms less per fresh 8-GPU body than level 6 for ~15 % more bytes.
    metrics_renderer = renderer if renderer is not None else MetricsRenderer(gzip_level=1)
    docs = config.api_docs
    app = _ExporterApp(
        title="gpu-exporter",
        version=__version__,
        description="Prometheus exporter for NVIDIA GPUs: who and what is using GPU memory.",
        redirect_slashes=False,  # exact paths: /metrics/ is a 404, never a redirect
        # Off by default: /docs and /redoc load their scripts from a CDN (--web.api-docs).
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )

    def scrape(
        timeout: float | None, accept: str | None, encoding: str | None
    ) -> tuple[bytes, dict[str, str], float, float]:
        start = time.perf_counter()
        state = scheduler.state(timeout)
        mid = time.perf_counter()
        body, headers = metrics_renderer.render(state, options, accept, encoding)
        return body, headers, mid - start, time.perf_counter() - mid

    async def serve_metrics(scope: Scope, receive: Receive, send: Send) -> None:
        # Plain ASGI, reached before anything of FastAPI's (see ``_ExporterApp``).
        start = time.perf_counter()
        accept = encoding = timeout_header = None
        for name, value in scope["headers"]:  # the first of each, as Starlette's get()
            if name == b"accept" and accept is None:
                accept = value.decode("latin-1")
            elif name == b"accept-encoding" and encoding is None:
                encoding = value.decode("latin-1")
            elif name == _TIMEOUT_HEADER_NAME and timeout_header is None:
                timeout_header = value.decode("latin-1")
        state = scheduler.current()
        mid = time.perf_counter()
        rendered = (None if state is None
                    else metrics_renderer.render_cached(state, options, accept, encoding))
        if rendered is not None:
            # Fresh data whose snapshot part is rendered already: answered here at once, as
            # cheap as an answer beyond the limit. A thread is for waiting on a collection.
            body, headers = rendered
            state_s, render_s = mid - start, time.perf_counter() - mid
            timing = "cached, "
        elif config.max_requests and telemetry.waiting >= config.max_requests:
            # Beyond --web.max-requests: the last collected data, at once, rendered here
            # (its families are cached per snapshot): no thread, no wait, so a flood of
            # scrapes cannot crowd a well-behaved scraper out. Before the first collection
            # there is nothing to serve: 503 at once.
            state = scheduler.latest()
            if state is None:
                await PlainTextResponse(
                    f"too many concurrent scrapes (--web.max-requests={config.max_requests}) "
                    "and no collection finished yet; retry later\n",
                    status_code=503, headers={**_NO_STORE, "Retry-After": "1"},
                )(scope, receive, send)
                return
            mid = time.perf_counter()
            body, headers = metrics_renderer.render(state, options, accept, encoding)
            state_s, render_s = mid - start, time.perf_counter() - mid
            timing = "latest, "  # tells benchmarks (and curious humans) this answer's kind
        else:
            timeout = scrape_timeout(timeout_header, config.timeout_offset)
            telemetry.waiting += 1
            try:
                body, headers, state_s, render_s = await run_in_threadpool(
                    scrape, timeout, accept, encoding)
            finally:
                telemetry.waiting -= 1
            timing = ""
        total = time.perf_counter() - start
        raw = [(name.lower().encode("latin-1"), value.encode("latin-1"))
               for name, value in headers.items()]
        raw += _METRICS_HEADERS
        raw.append((b"content-length", b"%d" % len(body)))
        raw.append((b"server-timing", (
            f"{timing}state;dur={state_s * 1e3:.3f}, render;dur={render_s * 1e3:.3f}, "
            f"total;dur={total * 1e3:.3f}").encode("latin-1")))
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    telemetry = Telemetry(config.telemetry_path, serve_metrics)
    app.telemetry = app.state.telemetry = telemetry  # state: for tests and debugging

    # The route describes /metrics in /openapi.json and answers other methods (405); a GET
    # or HEAD goes to ``serve_metrics`` straight from ``_ExporterApp``.
    async def metrics() -> None:
        """Never called (``_ExporterApp`` answers GET and HEAD of the path)."""

    app.add_api_route(
        config.telemetry_path, metrics, methods=["GET"],
        response_class=PlainTextResponse, summary="Prometheus metrics", tags=["metrics"],
        description="Text 0.0.4 or OpenMetrics by Accept header; gzip by Accept-Encoding.",
    )

    @app.get("/healthz", response_class=PlainTextResponse, tags=["health"])
    async def healthz() -> PlainTextResponse:
        """200 while the process is alive (liveness)."""
        return PlainTextResponse("ok\n", headers=_NO_STORE)

    @app.get("/readyz", tags=["health"], responses={503: {"description": "Not ready"}})
    async def readyz() -> JSONResponse:
        """200 when the source is initialised, the data fresh and some GPU answers; else 503."""
        ready = await run_in_threadpool(scheduler.await_ready, READY_WAIT_SECONDS)
        stats = scheduler.stats
        body: dict[str, Any] = {
            "status": "ready" if ready else "not ready",
            "reason": "ready" if ready else stats.reason(scheduler.stale_after),
            "source_initialised": stats.initialised,
            "data_age_seconds": stats.data_age_seconds,
            "collections": stats.collections,
            "last_collection_seconds": stats.last_duration_seconds,
            # GPUs whose NVML read has not returned (served gpu_up 0): index -> seconds
            "hung_gpus": {str(i): round(s, 3) for i, s in sorted(stats.hung_gpus.items())},
        }
        return JSONResponse(body, status_code=200 if ready else 503, headers=_NO_STORE)

    async def snapshot() -> JSONResponse:
        """The snapshot a scrape would serve now, as typed JSON."""
        from exporter.exposition.json_model import SnapshotResponse  # noqa: PLC0415 (lazy)

        state: ExporterState = await run_in_threadpool(scheduler.state)
        model = SnapshotResponse.from_state(state, options)
        return JSONResponse(model.model_dump(mode="json", by_alias=True))

    # The pydantic models (~1.5 MB resident) load on the first JSON request; with the API docs
    # on they load at start so that /openapi.json describes the response.
    app.add_api_route("/api/v1/snapshot", snapshot, methods=["GET"], tags=["api"],
                      response_model=_snapshot_model() if docs else None)

    @app.get("/", response_class=HTMLResponse, tags=["page"],
             openapi_extra={"parameters": [REFRESH_PARAMETER]})
    async def landing(request: Request) -> HTMLResponse:
        """Landing page: links and a live table of GPUs and top processes by memory."""
        from exporter.web.page import render_landing  # noqa: PLC0415 (a scrape never needs it)

        refresh = refresh_seconds(request.query_params)

        state: ExporterState = await run_in_threadpool(scheduler.state)
        page = render_landing(
            state, version=__version__, metrics_path=config.telemetry_path,
            refresh_seconds=refresh, api_docs=docs,
        )
        return HTMLResponse(page, headers=_PAGE_HEADERS)

    return app

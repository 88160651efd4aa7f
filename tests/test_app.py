"""The HTTP app in-process: routes, negotiation, gzip, limits, timeouts, bad requests."""

from __future__ import annotations

import gzip
import re
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from fastapi import FastAPI, Query, Request
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, default_groups
from exporter.config import Config
from exporter.scheduler import Backoff, Scheduler
from exporter.snapshot import GpuProcess, ProcessOwner, ProcessType, Snapshot
from exporter.web.access import AccessMiddleware, RequestLimits
from exporter.web.app import REFRESH_PARAMETER, create_app, refresh_seconds, scrape_timeout
from exporter.web.webconfig import WebConfig
from tests.scheduler_fakes import FakeSource

with warnings.catch_warnings():  # starlette suggests httpx2; httpx is what the project pins
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
EVIL = "<script>alert(1)</script>"


class ProcessSource(FakeSource):
    """A fake source whose GPU holds one process with a hostile user name."""

    def collect(self, groups: frozenset[Group]) -> Snapshot:
        snap = super().collect(groups)
        gpu = snap.gpus[0]
        proc = GpuProcess(
            pid=4242, type=ProcessType.COMPUTE, used_memory_bytes=3 << 30,
            sm_utilization_ratio=0.4,
            owner=ProcessOwner(uid=1001, user=EVIL, name="python3", start_time_seconds=1.0),
        )
        return replace(snap, gpus=(replace(gpu, processes=(proc,)),))


@contextmanager
def _serving(
    source: FakeSource | None = None, **config: object
) -> Iterator[tuple[TestClient, Scheduler]]:
    """The app as served (admission in front) and its scheduler, closed when the test ends."""
    source = source or ProcessSource()
    timeout = float(config.pop("timeout", 2.0))  # type: ignore[arg-type]
    sched = Scheduler(source, None, groups=default_groups(), min_interval=1.0,
                      timeout=timeout, stale_after=30.0, backoff=Backoff(jitter=0.0))
    full = Config(timeout=timeout, **config)  # type: ignore[arg-type]
    app = AccessMiddleware(  # as served: admission in front of every route
        create_app(full, sched),
        limits=RequestLimits(metrics_path=full.telemetry_path, metrics=0,
                             other=full.max_other_requests),
        web_config=WebConfig,
    )
    try:
        with TestClient(app) as test_client:
            yield test_client, sched
    finally:
        sched.close()


@pytest.fixture
def client() -> Iterator[TestClient]:
    with _serving() as (test_client, _):
        yield test_client


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_metrics_text_format(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert response.headers["cache-control"] == "no-store"
    assert "content-encoding" not in response.headers
    samples = _samples(response.text)
    used = samples[metrics.MEMORY_USED.name]
    assert used == [({"gpu": "0", "uuid": "GPU-0000"}, float(2 << 20))]
    assert samples[metrics.SOURCE_UP.name][0][1] == 1.0
    process = samples[metrics.PROCESS_MEMORY.name][0][0]
    assert process["user"] == EVIL  # label values carry it verbatim (escaped by the format)


def test_server_timing_header(client: TestClient) -> None:
    response = client.get("/metrics")
    timing = dict(re.findall(r"(\w+);dur=([0-9.]+)", response.headers["server-timing"]))
    assert set(timing) == {"state", "render", "total"}
    assert float(timing["total"]) >= float(timing["render"])
    assert float(timing["total"]) < 5_000


def test_fresh_data_already_rendered_is_answered_at_once(client: TestClient) -> None:
    def kind(encoding: str) -> str:
        response = client.get("/metrics", headers={"Accept-Encoding": encoding})
        assert response.headers.get("content-encoding", "identity") == encoding
        assert metrics.MEMORY_USED.name in _samples(response.text)  # httpx inflated it
        return response.headers["server-timing"].split(";")[0]

    # Collected and rendered in a thread; then, while the data is fresh (min_interval 1 s),
    # from the cache on the event loop; a format not rendered yet goes to a thread once.
    assert [kind("identity"), kind("identity"), kind("gzip"), kind("gzip")] == [
        "state", "cached, state", "state", "cached, state"]
    time.sleep(1.05)  # older than min_interval: the next scrape waits for a collection
    assert kind("identity") == "state"


def test_metrics_openmetrics_and_gzip(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": OPENMETRICS,
                                               "Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.headers["content-encoding"] == "gzip"
    assert response.text.endswith("# EOF\n")  # httpx decoded the gzip body
    assert f"# UNIT {metrics.MEMORY_USED.name} bytes" in response.text


def test_gzip_body_is_really_gzip(client: TestClient) -> None:
    with client.stream("GET", "/metrics", headers={"Accept-Encoding": "gzip"}) as response:
        raw = b"".join(response.iter_raw())
    assert raw[:2] == b"\x1f\x8b"
    assert metrics.MEMORY_TOTAL.name.encode() in gzip.decompress(raw)


def test_odd_accept_header_falls_back_to_text(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": "text/plain; version=abc;;;"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")


def test_exact_paths_and_methods(client: TestClient) -> None:
    assert client.get("/metrics/", follow_redirects=False).status_code == 404
    assert client.get("/nope").status_code == 404
    assert client.post("/metrics").status_code == 405
    assert client.delete("/api/v1/snapshot").status_code == 405


def test_custom_telemetry_path() -> None:
    with _serving(telemetry_path="/gpu/metrics") as (test_client, _):
        assert test_client.get("/gpu/metrics").status_code == 200
        assert test_client.get("/metrics").status_code == 404
        assert 'href="/gpu/metrics"' in test_client.get("/").text


def test_healthz_and_readyz(client: TestClient) -> None:
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.text == "ok\n"
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_readyz_reports_why_not() -> None:
    with _serving(FakeSource(start_failures=50)) as (test_client, _):
        response = test_client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "not ready"
        assert "NVML library not found" in body["reason"]
        assert body["source_initialised"] is False
        # The exporter keeps serving: metrics say the source is down.
        samples = _samples(test_client.get("/metrics").text)
        assert samples[metrics.SOURCE_UP.name][0][1] == 0.0
        assert metrics.MEMORY_USED.name not in samples


def test_snapshot_api_and_openapi(client: TestClient) -> None:
    response = client.get("/api/v1/snapshot")
    assert response.status_code == 200
    body = response.json()
    assert body["source"] == "fake"
    assert body["source_up"] is True
    assert [g["index"] for g in body["gpus"]] == [0]
    assert body["gpus"][0]["processes"][0]["pid"] == 4242
    for path in ("/openapi.json", "/docs", "/redoc"):  # off unless --web.api-docs
        assert client.get(path).status_code == 404
    assert 'href="/docs"' not in client.get("/").text


def test_api_docs_behind_the_flag() -> None:
    with _serving(api_docs=True) as (test_client, _):
        schema = test_client.get("/openapi.json").json()
        assert "/api/v1/snapshot" in schema["paths"]
        assert "SnapshotResponse" in schema["components"]["schemas"]
        assert test_client.get("/docs").status_code == 200
        assert 'href="/docs"' in test_client.get("/").text


def test_landing_page_escapes_and_links(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    page = response.text
    for link in ('href="/metrics"', 'href="/api/v1/snapshot"'):
        assert link in page
    assert "Fake GPU" in page
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<table id="gpus">' in page
    assert 'http-equiv="refresh"' not in page


def test_landing_page_refresh_parameter(client: TestClient) -> None:
    assert 'content="5"' in client.get("/?refresh=5").text
    bad = client.get("/?refresh=soon")
    assert bad.status_code == 422
    assert "refresh" in bad.text
    assert client.get("/?refresh=-1").status_code == 422
    assert client.get("/?refresh=99999").status_code == 422


@pytest.mark.parametrize("query", [
    "", "?refresh=5", "?refresh=05", "?refresh=%205", "?refresh=5.0", "?refresh=3600",
    "?refresh=1&refresh=2", "?refresh=soon", "?refresh=", "?refresh=-1", "?refresh=3601",
    "?refresh=5.5", "?refresh=1e2", "?refresh=%E2%91%A0",
])
def test_refresh_is_validated_exactly_as_fastapi_validates_the_query(query: str) -> None:
    declared, read = FastAPI(), FastAPI()

    @declared.get("/")
    async def by_fastapi(refresh: int = Query(
            0, ge=0, le=3600, description="Reload every N seconds (0: never).")) -> int:
        return refresh

    @read.get("/", openapi_extra={"parameters": [REFRESH_PARAMETER]})
    async def by_us(request: Request) -> int:
        return refresh_seconds(request.query_params)

    expected, got = TestClient(declared).get("/" + query), TestClient(read).get("/" + query)
    assert (got.status_code, got.json()) == (expected.status_code, expected.json())
    describe = [app.openapi()["paths"]["/"]["get"]["parameters"] for app in (declared, read)]
    assert describe[1] == describe[0]


def test_landing_page_when_source_down() -> None:
    with _serving(FakeSource(start_failures=50)) as (test_client, _):
        page = test_client.get("/").text
        assert "Source down: NVML library not found" in page
        assert "No GPUs." in page


def test_scrape_timeout_header_parsing() -> None:
    assert scrape_timeout(None, 0.5) is None
    assert scrape_timeout("abc", 0.5) is None
    assert scrape_timeout("-1", 0.5) is None
    assert scrape_timeout("inf", 0.5) is None
    assert scrape_timeout("nan", 0.5) is None
    assert scrape_timeout("10", 0.5) == pytest.approx(9.5)
    assert scrape_timeout("0.6", 0.5) == pytest.approx(0.3)  # offset > half: half the timeout


def test_scrape_timeout_header_bounds_the_wait() -> None:
    source = ProcessSource()
    with _serving(source, timeout=10.0, min_interval=0.0) as (test_client, sched):
        bad_header = test_client.get(
            "/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "soon"}
        )
        assert bad_header.status_code == 200  # odd header: default timeout, no error
        source.gate.clear()  # the next collection hangs
        time.sleep(1.05)  # older than min_interval (1 s)
        begin = time.monotonic()
        response = test_client.get(
            "/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "0.6"}
        )
        assert time.monotonic() - begin < 5.0  # the header's 0.6 s, not the collector's 10 s
        assert response.status_code == 200
        samples = _samples(response.text)
        assert samples[metrics.DATA_AGE.name][0][1] >= 1.0
        errors = {labels["kind"]: v for labels, v in samples.get(metrics.ERRORS.name, [])}
        # The client's short timeout ran out, not the collector's: stale data, no error, or
        # any client could fire the errors alert with a tiny header.
        assert errors.get("collection_timeout") is None
        assert metrics.MEMORY_USED.name in samples  # last good data still served
        for _ in range(20):
            test_client.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "0.01"})
        assert "collection_timeout" not in sched.state(0.0).errors_total
        source.gate.set()


def test_collection_overrunning_the_collector_timeout_counts_once() -> None:
    source = ProcessSource()
    with _serving(source, timeout=0.5, min_interval=0.0) as (test_client, sched):
        assert test_client.get("/metrics").status_code == 200
        source.gate.clear()
        time.sleep(1.05)
        for _ in range(3):
            test_client.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
        assert sched.state(0.0).errors_total.get("collection_timeout") == 1
        source.gate.set()


def test_beyond_max_requests_the_last_data_is_served_at_once() -> None:
    source = ProcessSource()
    with _serving(source, max_requests=2, timeout=10.0) as (test_client, _):
        results: list[int] = []
        lock = threading.Lock()

        def scrape() -> None:
            code = test_client.get("/metrics").status_code
            with lock:
                results.append(code)

        assert test_client.get("/metrics").status_code == 200  # one good collection
        source.gate.clear()  # the next collection hangs until released
        source.entered.clear()
        time.sleep(1.05)  # older than min_interval (1 s): the next scrape collects
        workers = [threading.Thread(target=scrape) for _ in range(2)]
        for worker in workers:
            worker.start()
        assert source.entered.wait(5)
        telemetry = test_client.app.app.state.telemetry  # type: ignore[attr-defined]
        deadline = time.monotonic() + 5
        while telemetry.waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # both scrapes are inside the handler, waiting on the collection
        assert telemetry.waiting == 2
        begin = time.monotonic()
        over = test_client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert time.monotonic() - begin < 5.0  # not queued behind the hung collection (10 s)
        assert over.status_code == 200
        assert over.headers["server-timing"].startswith("latest, state;dur=")
        samples = _samples(over.text)
        assert metrics.MEMORY_USED.name in samples  # the last collected data
        assert "collection_timeout" not in {
            labels["kind"] for labels, _ in samples.get(metrics.ERRORS.name, [])}
        source.gate.set()
        for worker in workers:
            worker.join(10)
        assert results == [200, 200]
        assert not test_client.get("/metrics").headers["server-timing"].startswith("latest")


def test_beyond_max_requests_before_any_collection_is_503_at_once() -> None:
    source = ProcessSource()
    with _serving(source, max_requests=2, timeout=10.0) as (test_client, _):
        source.gate.clear()  # the very first collection hangs: nothing collected yet
        workers = [threading.Thread(target=test_client.get, args=("/metrics",))
                   for _ in range(2)]
        for worker in workers:
            worker.start()
        telemetry = test_client.app.app.state.telemetry  # type: ignore[attr-defined]
        deadline = time.monotonic() + 5
        while telemetry.waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        begin = time.monotonic()
        over = test_client.get("/metrics")
        assert time.monotonic() - begin < 5.0  # at once, not after the collection (10 s)
        assert over.status_code == 503
        assert over.headers["retry-after"] == "1"
        assert "--web.max-requests=2" in over.text
        source.gate.set()
        for worker in workers:
            worker.join(10)


def test_every_exposed_family_is_from_the_catalogue(client: TestClient) -> None:
    text = client.get("/metrics", headers={"Accept-Encoding": "identity"}).text
    names = {family.name for family in text_string_to_metric_families(text)}
    known = {m.family_name for m in metrics.CATALOGUE} | {m.name for m in metrics.CATALOGUE}
    unknown = {n for n in names if n not in known and not n.startswith("process_")}
    assert unknown == set()
    assert metrics.MEMORY_USED.name in names
    assert metrics.BUILD_INFO.name in names

"""Under load: scrape latency against prometheus_client's own server, and 503s under a flood.

Usage (repository root; hold the bench lock here):

    .venv/bin/python bench/bench_load.py [--scrapes 500] [--clients 120] [--seconds 10]

Both parts use the exporter with its default settings on the simulated 8x32 node.

1. ``p50``: sequential scrapes over one keep-alive connection with Prometheus' headers
   (OpenMetrics, gzip), of the exporter and of ``prometheus_client.start_http_server`` serving
   the very same series (the exporter's own /metrics, parsed once into metric families and
   returned by a collector on every scrape: only prometheus_client's encoding and HTTP remain).
   Target: the exporter's p50 at or below prometheus_client's.
2. ``flood``: ``--clients`` keep-alive connections send /metrics requests back to back for
   ``--seconds``, once with the default ``--web.max-requests`` and once with a low limit so
   that the gate must turn requests away. Target: a 503 answers within 50 ms at p99, and no
   connection fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Scraper, Server, free_port, hammer, percentile

SCENARIO = ("--source", "simulated", "--scenario", "synthetic:8x32")
TARGET_503_P99_MS = 50.0
#: prometheus_client's own server, serving fixed families parsed from a text exposition.
_PROMETHEUS_CLIENT = r"""
import sys, time
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
families = list(text_string_to_metric_families(open(sys.argv[1]).read()))
class Fixed:
    def collect(self):
        return families
registry = CollectorRegistry()
registry.register(Fixed())
start_http_server(int(sys.argv[2]), addr="127.0.0.1", registry=registry)
time.sleep(3600)
"""


def sequential(port: int, scrapes: int) -> tuple[list[float], int]:
    """Client-side ms of ``scrapes`` sequential scrapes (after 20 warm-up ones); body size."""
    with Scraper(port) as client:
        for _ in range(20):
            client.get()
        samples, size = [], 0
        for _ in range(scrapes):
            start = time.perf_counter()
            status, _, body = client.get()
            samples.append((time.perf_counter() - start) * 1e3)
            if status != 200:
                raise SystemExit(f"/metrics answered {status}")
            size = len(body)
    return samples, size


def compare_p50(scrapes: int) -> bool:
    with Server.exporter(*SCENARIO) as exporter:
        with Scraper(exporter.port) as client:
            text = client.get("/metrics", {})[2]
        ours, our_size = sequential(exporter.port, scrapes)
    with tempfile.NamedTemporaryFile(suffix=".prom") as body:
        body.write(text)
        body.flush()
        port = free_port()
        with Server([sys.executable, "-c", _PROMETHEUS_CLIENT, body.name, str(port)],
                    port=port, ready_path="/metrics") as reference:
            theirs, their_size = sequential(reference.port, scrapes)
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    print(f"p50: {scrapes} sequential scrapes each, OpenMetrics + gzip, {series} series")
    print(f"{'server':<34} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'body B':>8}")
    for name, samples, size in (("gpu-exporter (defaults)", ours, our_size),
                                ("prometheus_client start_http_server", theirs, their_size)):
        print(f"{name:<34} {statistics.median(samples):>8.2f} {percentile(samples, 99):>8.2f} "
              f"{statistics.fmean(samples):>8.2f} {size:>8}")
    ok = statistics.median(ours) <= statistics.median(theirs)
    print(f"{'PASS' if ok else 'FAIL'}: gpu-exporter p50 <= prometheus_client's "
          f"({statistics.median(theirs) / statistics.median(ours):.1f}x faster)\n")
    return ok


def flood(clients: int, seconds: float) -> bool:
    print(f"flood: {clients} keep-alive clients sending /metrics back to back for {seconds:g} s")
    print(f"{'exporter flags':<28} {'requests':>8} {'200':>7} {'503':>7} {'other':>6} "
          f"{'failed':>6} {'200 p50':>8} {'200 p99':>8} {'503 p50':>8} {'503 p99':>8}")
    ok = True
    for flags in ((), ("--web.max-requests", "4")):
        with Server.exporter(*SCENARIO, *flags) as server:
            by_status, failures = hammer(server.port, clients, seconds)
            alive = server.proc.poll() is None
        ok_ms, busy_ms = by_status.get(200, []), by_status.get(503, [])
        other = sum(len(v) for k, v in by_status.items() if k not in (200, 503))
        total = sum(len(v) for v in by_status.values())

        def cell(values: list[float], q: float) -> str:
            return f"{percentile(values, q):>8.2f}" if values else f"{'-':>8}"

        label = " ".join(flags) or "(defaults)"
        print(f"{label:<28} {total:>8} {len(ok_ms):>7} {len(busy_ms):>7} {other:>6} "
              f"{len(failures):>6} {cell(ok_ms, 50)} {cell(ok_ms, 99)} {cell(busy_ms, 50)} "
              f"{cell(busy_ms, 99)}")
        ok &= alive and not failures and not other
        if busy_ms:
            ok &= percentile(busy_ms, 99) <= TARGET_503_P99_MS
    print(f"{'PASS' if ok else 'FAIL'}: every 503 p99 <= {TARGET_503_P99_MS:g} ms, no failed "
          "connection, server alive")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scrapes", type=int, default=500, help="sequential scrapes (500)")
    parser.add_argument("--clients", type=int, default=120, help="flood clients (120)")
    parser.add_argument("--seconds", type=float, default=10.0, help="flood duration (10)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if not (1 <= args.scrapes <= 100_000 and 1 <= args.clients <= 2000
            and 0 < args.seconds <= 120):
        parser.error("--scrapes 1..100000, --clients 1..2000, --seconds 0..120")
    ok = compare_p50(args.scrapes)
    ok &= flood(args.clients, args.seconds)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())

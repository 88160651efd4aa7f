"""PodResources client benchmark: answer size -> List + parse + filter time, and memory.

Run from the repository root: ``.venv/bin/python bench/bench_podresources.py [--rounds 9]``.

A fake kubelet (``tests/fixtures/kubelet.py``, serving the v1 ``List``) runs in a separate
process and answers ``List`` with one GPU pod plus N GPU-less pods (8 exclusive CPUs and one
memory assignment each, like a busy node); the client side runs here. Prints, per N: the
answer's size, wall time and this process's CPU time per ``list_allocations()`` (p50), and
the resident memory added by importing gRPC/protobuf and the generated messages (the cost of
switching the feature on; it is imported lazily).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVER = """
import sys, time
sys.path.insert(0, {root!r})
from exporter.attribution.podresources.v1 import api_pb2
from tests.fixtures.kubelet import GPU, FakeKubelet, filler, pod
pods = [pod("ml", "trainer-0", {{"main": [(GPU, ["GPU-1"])]}})] + filler({count})
kubelet = FakeKubelet({socket!r}, pods).start()
answer = api_pb2.ListPodResourcesResponse(pod_resources=pods)
kubelet.answer = lambda context: answer  # serialised once: time the client, not the fake
print("ready", flush=True)
time.sleep(600)
"""


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pods", type=int, nargs="*", default=[100, 1000, 10000, 40000])
    args = parser.parse_args()

    from exporter.attribution.podresources.client import PodResourcesClient  # noqa: PLC0415

    before = rss_mib()
    import grpc  # noqa: F401, PLC0415

    from exporter.attribution.podresources.v1 import api_pb2  # noqa: F401, PLC0415

    print(f"import grpc + protobuf + generated messages: +{rss_mib() - before:.1f} MiB RSS")
    print("pods    answer     wall p50   client CPU p50")
    for count in args.pods:
        directory = tempfile.mkdtemp(prefix="kb", dir="/tmp")
        socket_path = os.path.join(directory, "kubelet.sock")
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER.format(root=str(ROOT), count=count, socket=socket_path)],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                raise SystemExit("fake kubelet did not start")
            client = PodResourcesClient(socket_path, timeout_seconds=30)
            walls, cpus, size = [], [], 0
            for _ in range(args.rounds):
                wall, cpu = time.perf_counter(), time.process_time()
                table, size = client.list_allocations()
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
                assert len(table.allocations) == 1
            print(f"{count:>6}  {size / 2**20:6.2f} MiB  {statistics.median(walls) * 1000:7.1f} ms"
                  f"  {statistics.median(cpus) * 1000:7.1f} ms")
        finally:
            server.kill()
            server.wait()
            for name in os.listdir(directory):
                os.unlink(os.path.join(directory, name))
            os.rmdir(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())

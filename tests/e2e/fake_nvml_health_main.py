"""``python -m tests.e2e.fake_nvml_health_main ARGS``: the real CLI with ``pynvml`` replaced by the
health fake (``tests.sources.fake_nvml_health``): two H200-like GPUs.

Environment (all optional):

- ``GPU_EXPORTER_TEST_XIDS="0:79,1:31x50"``: once the exporter has registered its events on a
  GPU, emit these XIDs there (``x50``: fifty of them);
- ``GPU_EXPORTER_TEST_MIG=1``: GPU 0 is in MIG mode (a 3g.71gb and a 1g.18gb GPU instance, this
  very process running in the 1g.18gb one, so owner lookup in the real ``/proc`` finds it);
- ``GPU_EXPORTER_TEST_REMAP="1"``: GPU 1 has 2 corrected / 1 uncorrected remapped rows, pending;
- ``GPU_EXPORTER_TEST_NO_EVENTS=1``: NVML refuses event registration on GPU 1.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from tests.sources.fake_nvml import FakeProcess
from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health, mig_device

GiB = 1 << 30


def _emit_when_registered(fake: FakeHealthNvml, plan: list[tuple[int, int, int]]) -> None:
    deadline = time.monotonic() + 60
    pending = list(plan)
    while pending and time.monotonic() < deadline:
        for item in list(pending):
            index, code, count = item
            if fake.xid(index, code):  # delivered: a set is registered for it
                for _ in range(count - 1):
                    fake.xid(index, code)
                pending.remove(item)
        time.sleep(0.05)


def _plan(text: str) -> list[tuple[int, int, int]]:
    plan = []
    for item in filter(None, text.split(",")):
        gpu, _, rest = item.partition(":")
        code, _, count = rest.partition("x")
        plan.append((int(gpu), int(code), int(count or 1)))
    return plan


def build() -> FakeHealthNvml:
    """The fake, configured from the environment."""
    pid = os.getpid()
    gpu0 = h200_health(0, memory_used=7 << 30)
    gpu1 = h200_health(1)
    if os.environ.get("GPU_EXPORTER_TEST_MIG"):
        gpu0.mig_mode = (1, 1)
        gpu0.mig_devices = {
            0: mig_device(0, gi=2, ci=0, profile="3g.71gb", memory_total=70 * GiB,
                          memory_used=1 * GiB),
            3: mig_device(0, gi=7, ci=0, profile="1g.18gb", memory_total=17 * GiB,
                          memory_used=6 * GiB + (16 << 20),
                          processes=[FakeProcess(pid=pid, used_memory=6 << 30,
                                                 gpu_instance_id=7, compute_instance_id=0)]),
        }
    else:
        gpu0.compute = [FakeProcess(pid=pid, used_memory=6 << 30)]
    if os.environ.get("GPU_EXPORTER_TEST_REMAP"):
        gpu1.remapped = (2, 1, 1, 0)
    if os.environ.get("GPU_EXPORTER_TEST_NO_EVENTS"):
        gpu1.supported_events = 0
    return FakeHealthNvml([gpu0, gpu1])


def main() -> int:
    fake = build()
    plan = _plan(os.environ.pop("GPU_EXPORTER_TEST_XIDS", ""))
    if plan:
        threading.Thread(target=_emit_when_registered, args=(fake, plan), daemon=True,
                         name="test-xid-emitter").start()
    sys.modules["pynvml"] = fake
    from exporter.cli import main as cli_main  # noqa: PLC0415 (after the fake is in place)

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())

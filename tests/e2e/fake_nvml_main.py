"""``python -m tests.e2e.fake_nvml_main ARGS``: the real CLI with ``pynvml`` replaced by the
test fake (two H200-like GPUs; GPU 0 holds a 6 GiB context of this very process, so owner
lookup in the real ``/proc`` finds it).

``GPU_EXPORTER_TEST_HANG=<nvml function>`` makes that call block forever from the start (a hung
driver), to test that the server stays responsive and still shuts down cleanly;
``GPU_EXPORTER_TEST_HANG_GPU=<index>`` limits the hang to that GPU.
"""

from __future__ import annotations

import os
import sys

from tests.sources.fake_nvml import FakeNvml, FakeProcess, h200


def main() -> int:
    fake = FakeNvml([h200(0, memory_used=7 << 30), h200(1)])
    fake.gpus[0].compute = [FakeProcess(pid=os.getpid(), used_memory=6 << 30)]
    hang = os.environ.pop("GPU_EXPORTER_TEST_HANG", "")
    hang_gpu = os.environ.pop("GPU_EXPORTER_TEST_HANG_GPU", "")
    if hang:
        fake.hang(hang, gpu=int(hang_gpu) if hang_gpu else None)
    sys.modules["pynvml"] = fake
    from exporter.cli import main as cli_main  # noqa: PLC0415 (after the fake is in place)

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())

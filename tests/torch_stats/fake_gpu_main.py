"""``python -m tests.torch_stats.fake_gpu_main ARGS``: the real CLI on a fake NVML with one
H200-like GPU listing the processes named in ``FAKE_GPU_PROCESSES`` (``pid:bytes,...``) under
the uuid in ``FAKE_GPU_UUID``: what ``scripts/gpu/check_torch_publisher.py --fake`` runs the
exporter on, so the script's checks can be exercised without a GPU.
"""

from __future__ import annotations

import os
import sys

from tests.sources.fake_nvml import FakeNvml, FakeProcess, h200


def main() -> int:
    processes = [
        FakeProcess(pid=int(pid), used_memory=int(used))
        for pid, used in (item.split(":") for item in
                          os.environ.get("FAKE_GPU_PROCESSES", "").split(",") if item)
    ]
    gpu = h200(0, uuid=os.environ.get("FAKE_GPU_UUID", "GPU-fake"),
               memory_used=sum(p.used_memory for p in processes) + (300 << 20))
    gpu.compute = processes
    sys.modules["pynvml"] = FakeNvml([gpu])
    from exporter.cli import main as cli_main  # noqa: PLC0415 (after the fake is in place)

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())

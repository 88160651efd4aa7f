"""``python -m tests.slurm.fake_nvml_jobs_main ARGS``: the real CLI with ``pynvml`` replaced by
the test fake (two H200-like GPUs: GPU 0 busy at 60 %, GPU 1 idle), whose GPU 0 lists as its
compute processes the pids written, one a line, in the file ``GPU_EXPORTER_TEST_PID_FILE``
(read every 0.1 s): the real processes of a real Slurm job, so the exporter reads their real
``/proc/<pid>/cgroup`` and owner.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from tests.sources.fake_nvml import FakeNvml, FakeProcess, h200


def _follow(fake: FakeNvml, path: Path) -> None:
    while True:
        try:
            pids = [int(line) for line in path.read_text().split() if line.isdigit()]
        except OSError:
            pids = []
        fake.gpus[0].compute = [FakeProcess(pid=pid, used_memory=3 << 30) for pid in pids]
        time.sleep(0.1)


def main() -> int:
    fake = FakeNvml([h200(0, memory_used=4 << 30, util_gpu=60, minor=0), h200(1, minor=1)])
    pid_file = Path(os.environ.pop("GPU_EXPORTER_TEST_PID_FILE"))
    threading.Thread(target=_follow, args=(fake, pid_file), daemon=True).start()
    sys.modules["pynvml"] = fake
    from exporter.cli import main as cli_main  # noqa: PLC0415 (after the fake is in place)

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())

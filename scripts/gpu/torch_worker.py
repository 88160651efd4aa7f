"""A torch process for the allocator-publisher check: holds tensors plus some allocator cache
on one GPU and says, on request, what torch itself reports.

Usage: python3 torch_worker.py --gpu 0 --tensor-mib 3000 --cache-mib 1000 [--explicit]
                               [--seconds 300]

Allocates ``--tensor-mib`` in 64 MiB tensors it keeps, plus ``--cache-mib`` it frees again (so
PyTorch keeps it reserved: allocated < reserved). With ``--explicit`` it enables the publisher
itself (``import gpu_exporter_torch; gpu_exporter_torch.start()``); otherwise it relies on the
environment (``gpu-exporter-run``: GPU_EXPORTER_TORCH=1 and the hook on PYTHONPATH), or publishes
nothing. Commands on stdin, one per line, each answered by one JSON line on stdout:

- ``report``: ``{"event": "report", "pid", "allocated", "reserved", "stats": {...}}`` where
  ``allocated``/``reserved`` are ``torch.cuda.memory_allocated/memory_reserved`` and ``stats``
  the published ``torch.cuda.memory_stats`` keys;
- ``oom``: asks for 400 GiB, catches ``torch.cuda.OutOfMemoryError``, then reports
  (``"event": "oom"``);
- ``exit``: exits 0. EOF or ``--seconds`` also end it (bounded run time).

The first line, once the memory is held, is a report with ``"event": "ready"``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import time
from typing import Any

# The check puts the package on every worker's PYTHONPATH; importing it starts nothing.
from gpu_exporter_torch import STAT_KEYS

MIB = 1 << 20
CHUNK = 64 * MIB


def report(torch: Any, gpu: int, event: str) -> None:
    stats = torch.cuda.memory_stats(gpu)
    uuid = str(torch.cuda.get_device_properties(gpu).uuid)
    line = {
        "event": event,
        "pid": os.getpid(),
        "uuid": uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}",
        "uid": os.getuid(),
        "allocated": torch.cuda.memory_allocated(gpu),
        "reserved": torch.cuda.memory_reserved(gpu),
        "stats": {name: stats.get(key) for name, key in STAT_KEYS.items()},
    }
    print(json.dumps(line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--tensor-mib", type=int, default=1024)
    parser.add_argument("--cache-mib", type=int, default=512)
    parser.add_argument("--explicit", action="store_true")
    parser.add_argument("--seconds", type=float, default=300.0)
    args = parser.parse_args()

    import torch  # type: ignore[import-not-found]  # noqa: PLC0415 - GPU machine (or the fake)

    if args.explicit:
        import gpu_exporter_torch  # noqa: PLC0415

        gpu_exporter_torch.start()
    device = f"cuda:{args.gpu}"
    torch.cuda.set_device(args.gpu)
    held = [torch.empty(CHUNK, dtype=torch.uint8, device=device)
            for _ in range(args.tensor_mib * MIB // CHUNK)]
    spare = [torch.empty(CHUNK, dtype=torch.uint8, device=device)
             for _ in range(args.cache_mib * MIB // CHUNK)]
    del spare  # back to PyTorch's cache: still reserved, no longer allocated
    torch.cuda.synchronize(args.gpu)
    report(torch, args.gpu, "ready")

    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if not ready:
            continue
        command = sys.stdin.readline().strip()
        if command in ("", "exit"):
            break
        if command == "oom":
            with contextlib.suppress(torch.cuda.OutOfMemoryError):  # caught, as programs do
                torch.empty(400 << 30, dtype=torch.uint8, device=device)
            report(torch, args.gpu, "oom")
        elif command == "report":
            report(torch, args.gpu, "report")
    del held
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

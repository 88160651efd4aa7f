"""A CUDA process for GPU checks: holds N GiB on one GPU and runs one kind of work.

Usage: python3 cuda_load.py --gpu 0 --gib 6 --kind bf16 --seconds 300 [--size 16384]

Kinds: idle (memory held, no kernel), bf16 / fp16 (tensor-core matrix products), fp32 (matrix
products on the CUDA cores: TF32 off), copy (device-to-device copies: memory-bound), spin (one
thread spinning in a kernel: busy by utilisation, nearly no SM activity). ``--busy`` is
``--kind bf16``; ``--size`` sets the matrices' side (an fp16 16384 loop holds an H100 at its
power limit). Prints ``ready <pid>`` once the memory is allocated; exits after ``--seconds``
at the latest (every load loop is bounded), or when killed.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

KINDS = ("idle", "bf16", "fp16", "fp32", "copy", "spin")


def work(torch: Any, kind: str, device: Any, size: int = 0) -> Callable[[], None] | None:
    """One round of ``kind`` (a few hundred ms of GPU time at most); None for idle."""
    if kind == "idle":
        return None
    if kind == "spin":
        return lambda: torch.cuda._sleep(100_000_000)  # one thread, ~50 ms at 2 GHz
    if kind == "copy":
        source = torch.empty(2 << 30, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)

        def copy() -> None:
            for _ in range(10):
                target.copy_(source)
        return copy
    if kind == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = False
    default, dtype = {"bf16": (8192, torch.bfloat16), "fp16": (8192, torch.float16),
                      "fp32": (4096, torch.float32)}[kind]
    size = size or default
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def products() -> None:
        for _ in range(10):
            a @ b  # the product is the work
    return products


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--kind", choices=KINDS, default="idle")
    parser.add_argument("--busy", action="store_true", help="the same as --kind bf16")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--size", type=int, default=0, help="matrix side (0: the kind's)")
    args = parser.parse_args()

    import torch  # type: ignore[import-not-found]  # noqa: PLC0415 - GPU machine only

    device = torch.device(f"cuda:{args.gpu}")
    torch.cuda.set_device(device)
    hold = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device=device)
    hold.fill_(1)
    step = work(torch, "bf16" if args.busy else args.kind, device, args.size)
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        if step is None:
            time.sleep(0.2)
            continue
        step()
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

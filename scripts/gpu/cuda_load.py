"""A CUDA process for GPU checks: holds N GiB on one GPU, busy (matmul loop) or idle.

Usage: python3 cuda_load.py --gpu 0 --gib 6 --busy --seconds 300
Prints ``ready <pid>`` once the memory is allocated; exits after ``--seconds`` at the latest
(every load loop is bounded), or when killed.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--seconds", type=float, default=300.0)
    args = parser.parse_args()

    import torch  # type: ignore[import-not-found]  # noqa: PLC0415 - GPU machine only

    device = torch.device(f"cuda:{args.gpu}")
    torch.cuda.set_device(device)
    hold = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device=device)
    hold.fill_(1)
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16) if args.busy else None
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        if a is not None:
            for _ in range(20):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        else:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

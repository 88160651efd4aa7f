"""A few torch calls, enough for the check_last_active child; logs activity for fake pynvml."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

_LOG = os.environ["FAKE_GPU_LOG"]
_state = {"pending": False}  # kernels queued since the last synchronize()


def _write(kind: str) -> None:
    with open(_LOG, "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()} {kind} {time.time():.6f}\n")


class Tensor:
    def fill_(self, value: Any) -> Tensor:
        return self

    def clamp_(self, low: float, high: float) -> Tensor:
        return self

    def __matmul__(self, other: Tensor) -> Tensor:
        _state["pending"] = True
        return self


bfloat16 = uint8 = object()


def _always_busy() -> None:
    while True:
        time.sleep(0.3)
        _write("busy")


def empty(*args: Any, **kwargs: Any) -> Tensor:
    _write("alloc")
    if os.environ.get("FAKE_TORCH_ALWAYS_BUSY"):  # a lying sample source, for the FAIL test
        threading.Thread(target=_always_busy, daemon=True).start()
    return Tensor()


def randn(*args: Any, **kwargs: Any) -> Tensor:
    return Tensor()


class cuda:  # mirrors torch.cuda
    @staticmethod
    def set_device(device: Any) -> None:
        pass

    @staticmethod
    def synchronize() -> None:
        if _state["pending"]:
            time.sleep(0.05)
            _write("busy")
            _state["pending"] = False

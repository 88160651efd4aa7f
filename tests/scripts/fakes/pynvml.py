"""Fake pynvml for check_last_active: processes and samples come from $FAKE_GPU_LOG."""

from __future__ import annotations

import os
import time
import types

NVML_ERROR_NOT_FOUND = 6
_BUFFER_S = float(os.environ.get("FAKE_NVML_BUFFER_S", "10"))


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetHandleByIndex(index: int) -> object:
    return ("gpu", index)


def _events() -> list[tuple[int, str, float]]:
    try:
        with open(os.environ["FAKE_GPU_LOG"], encoding="utf-8") as log:
            rows = [line.split() for line in log]
    except FileNotFoundError:
        return []
    return [(int(r[0]), r[1], float(r[2])) for r in rows if len(r) == 3]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie (killed, not yet reaped) holds no GPU context
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def nvmlDeviceGetComputeRunningProcesses(handle: object) -> list[types.SimpleNamespace]:
    pids = {p for p, kind, _ in _events() if kind == "alloc" and _alive(p)}
    return [types.SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in sorted(pids)]


def nvmlDeviceGetProcessUtilization(handle: object, last_seen: int) -> list[types.SimpleNamespace]:
    now = time.time()
    newest: dict[int, float] = {}
    for pid, kind, stamp in _events():
        if kind == "busy" and _alive(pid):
            newest[pid] = max(newest.get(pid, 0.0), stamp)
    found = [
        types.SimpleNamespace(pid=pid, timeStamp=int(stamp * 1e6), smUtil=90, memUtil=10,
                              encUtil=0, decUtil=0)
        for pid, stamp in newest.items()
        if int(stamp * 1e6) > last_seen and (last_seen or now - stamp < _BUFFER_S)
    ]
    if not found:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return found

"""glibc malloc settings applied at start-up unless the user set them."""

from __future__ import annotations

import subprocess
import sys

from exporter.memory import SETTINGS, tune_malloc

#: A child environment without the test run's MALLOC_* variables.
_NO_MALLOC_ENV = {"PATH": "/usr/bin:/bin"}


def _child(code: str, env: dict[str, str] | None = None) -> str:
    """What ``python -c code`` prints, run in a child (its imports and malloc settings stay
    out of the test process)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env, timeout=60).stdout.strip()


def test_applies_every_setting_the_environment_leaves_open() -> None:
    calls: list[tuple[int, int]] = []

    def mallopt(parameter: int, value: int) -> int:
        calls.append((parameter, value))
        return 1

    applied = tune_malloc({"MALLOC_ARENA_MAX": "4"}, mallopt)
    assert applied == ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
    assert calls == [(parameter, value) for variable, parameter, value in SETTINGS
                     if variable != "MALLOC_ARENA_MAX"]


def test_a_refused_setting_is_not_reported_as_applied() -> None:
    assert tune_malloc({}, lambda parameter, value: 0) == []


def test_real_glibc_accepts_the_settings() -> None:
    # In a child: the settings must not leak into the test process.
    code = ("import os; from exporter.memory import tune_malloc; "
            "print(','.join(tune_malloc(os.environ)))")
    assert _child(code, _NO_MALLOC_ENV) == ",".join(variable for variable, _, _ in SETTINGS)


def test_start_up_leaves_out_what_a_scrape_never_needs() -> None:
    # YAML and the simulator (NVML users), Kubernetes code (--kubernetes off: the pod
    # resolver, the kubelet PodResources client and its allocation join), the container-name
    # resolver (--containers off), the landing page and the JSON models (loaded on their first
    # request), bcrypt (basic auth users only), psutil (only when /proc/stat has no boot
    # time): each costs resident memory.
    lazy = ("yaml", "exporter.sources.simulated.scenario", "exporter.attribution.kubernetes",
            "exporter.attribution.podresources.client",
            "exporter.allocations",
            "exporter.allocations", "exporter.attribution.container_names",
            "exporter.web.page", "exporter.exposition.json_model", "bcrypt", "psutil")
    code = ("import sys, exporter.cli; "
            f"print(','.join(m for m in {lazy!r} if m in sys.modules))")
    assert _child(code) == ""


def test_the_app_leaves_out_pydantic_v1() -> None:
    # FastAPI's analysis of a declared query parameter imports pydantic.v1 (0.9 MB resident).
    code = ("import sys, exporter.cli; from exporter.web.app import create_app; "
            "config = exporter.cli.parse_config(['--source', 'nvml'], {}); "
            "create_app(config, scheduler=None); print('pydantic.v1' in sys.modules)")
    assert _child(code) == "False"


def test_release_free_heap_gives_freed_pages_back() -> None:
    # In a child: 200 MB allocated in small chunks and freed stays resident until trimmed.
    code = ("import ctypes; from exporter.memory import release_free_heap\n"
            "def rss():\n"
            "    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20\n"
            "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p\n"
            "libc.free.argtypes = (ctypes.c_void_p,)\n"
            "blocks = [libc.malloc(4096) for _ in range(50000)]\n"
            "for block in blocks: libc.memset(ctypes.c_void_p(block), 1, 4096)\n"
            "# the last block stays: above the others, it stops free() shrinking the heap\n"
            "for block in blocks[:-1]: libc.free(ctypes.c_void_p(block))\n"
            "before = rss(); released = release_free_heap()\n"
            "print(released, round(before - rss()))")
    out = _child(code, _NO_MALLOC_ENV).split()
    assert out[0] == "True"
    assert int(out[1]) >= 150  # MB given back

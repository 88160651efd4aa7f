"""glibc malloc settings that keep the exporter's resident memory at its floor.

glibc gives every new thread that allocates its own malloc arena (up to 8 per core) and raises
its mmap threshold each time a large block is freed, so that later large blocks (a 180 KB
text body, its gzip buffer) come from arena heaps that are rarely given back. Scrapes run on
the HTTP server's thread pool, so concurrent scrapes grew RSS by 9-16 MB on the simulated 8x32
node (40 clients for 4 s: 54 -> 63 MB with shared collections, 55 -> 71 MB with a collection
per scrape); with two arenas and fixed mmap and trim thresholds the same load ends at 57-58 MB
(``bench/bench_memory.py`` measures the sequential case; the numbers above came from the same
flood as ``bench/bench_load.py``).

Settings the user made through ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` win. Other C libraries (musl) have no such knobs: nothing is done.

Start-up frees much of what it allocated (NVML's initialisation, the first collection's
plans), in chunks below the trim threshold or in the middle of an arena, so glibc keeps those
pages. ``release_free_heap`` hands them back once, after the first collection: on the H200
the exporter ends +6.2 to +7.4 MB over the floor in seven runs, against +8.7 to +8.9 without
(``bench/bench_memory.py --nvml``, shared collections and a collection per scrape). Once is
enough: trimming after every collection (~0.3 ms each) ended no lower.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Mapping
from typing import Final

__all__ = ["SETTINGS", "release_free_heap", "tune_malloc"]

log = logging.getLogger(__name__)

# mallopt parameters from glibc's malloc.h.
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8

#: (environment variable that overrides it, mallopt parameter, value)
SETTINGS: Final = (
    ("MALLOC_ARENA_MAX", _M_ARENA_MAX, 2),
    ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, 128 * 1024),
    ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, 128 * 1024),
)


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (absent outside glibc)
    except (OSError, AttributeError):
        return None
    return libc


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    libc = _glibc()
    if libc is None:
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def release_free_heap() -> bool:
    """Give the free pages of every malloc arena back to the kernel (glibc's ``malloc_trim``).

    Returns whether memory was released. Never raises: other C libraries do nothing.
    """
    libc = _glibc()
    if libc is None:
        return False
    malloc_trim = libc.malloc_trim
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))


def tune_malloc(
    environ: Mapping[str, str], mallopt: Callable[[int, int], int] | None = None
) -> list[str]:
    """Apply ``SETTINGS`` (call before any thread starts); returns the variables applied.

    ``mallopt`` replaces glibc's (tests). Never raises: a C library without the knobs just
    keeps its defaults.
    """
    if mallopt is None:
        mallopt = _glibc_mallopt()
        if mallopt is None:
            log.debug("not glibc: malloc settings left alone")
            return []
    applied = []
    for variable, parameter, value in SETTINGS:
        if variable in environ:
            continue
        if mallopt(parameter, value) == 1:  # mallopt returns 1 on success
            applied.append(variable)
    return applied

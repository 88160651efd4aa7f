"""The Slurm prolog convention for GPU allocations (Jobstats'): file names and contents, parsed.

A Slurm prolog writes one small file per GPU it gives a job into a directory (``/run/gpustat``
by default), and the epilog removes it. The file's name says which device, its one line which
job holds it and as whom::

    /run/gpustat/0                                          "913377 2001"
    /run/gpustat/GPU-0f4a1c2e-5b6d-4e8f-9a0b-1c2d3e4f5a6b     "913377 2001"
    /run/gpustat/MIG-5c1e0f3a-8d2b-4c6e-a1f0-3b5d7e9c1a2f     "913402 2002"
    /run/gpustat/3.7       (GPU 3's MIG GPU instance 7)     "913410 2003"

A name is the GPU's NVML index, ``<index>.<GPU instance>``, or the NVML UUID (``GPU-`` or
``MIG-``); the line is ``<job id> [<uid>]``. Jobstats' prolog writes the index and UUID files;
the plazonic exporter Jobstats uses reads the UUID file first, then the index one, and so does
gpu-exporter (``exporter.attribution.slurm_allocations`` reads the directory; this module only
parses). Anything else in the directory (a prolog's temporary file, an editor's backup) is no
allocation file and is ignored; a file whose name is one but whose content is not is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_DIRECTORY", "MAX_ENTRIES", "MAX_FILE_BYTES", "RESOURCE", "DeviceName",
           "JobHolder", "parse_content", "parse_name"]

DEFAULT_DIRECTORY: Final = "/run/gpustat"
#: The ``resource`` label of a Slurm allocation: Slurm's trackable resource for GPUs.
RESOURCE: Final = "gres/gpu"
#: Largest allocation file read ("4294967294 4294967294\n" is 22 bytes).
MAX_FILE_BYTES: Final = 256
#: Most directory entries looked at (a node has at most a few dozen GPUs and MIG devices).
MAX_ENTRIES: Final = 1024
#: Slurm job ids and uids are 32-bit unsigned numbers.
_LIMIT = 1 << 32

_INDEX = re.compile(r"^(0|[1-9][0-9]{0,3})(?:\.(0|[1-9][0-9]{0,3}))?$")
_UUID = re.compile(r"^(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}$")
_NUMBER = re.compile(r"^[0-9]{1,10}$")


@dataclass(frozen=True, slots=True)
class DeviceName:
    """The device an allocation file's name names: an NVML index (and a MIG GPU instance of
    it), or a UUID (``GPU-...`` or ``MIG-...``)."""

    index: int | None = None
    gpu_instance: int | None = None
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class JobHolder:
    """Who holds the device: the job id and the job owner's uid ("" when the file gives
    none), both decimal numbers as written."""

    job_id: str
    uid: str = ""


def parse_name(name: str) -> DeviceName | None:
    """The device ``name`` names, or None for any other directory entry."""
    if _UUID.match(name):
        return DeviceName(uuid=name)
    found = _INDEX.match(name)
    if found is None:
        return None
    instance = found.group(2)
    return DeviceName(index=int(found.group(1)),
                      gpu_instance=None if instance is None else int(instance))


def _number(text: str) -> str | None:
    return text if _NUMBER.match(text) and int(text) < _LIMIT else None


def parse_content(data: bytes) -> JobHolder | None:
    """The job holding the device from a file's bytes (one line ``<job id> [<uid>]``), or None
    when they are anything else (empty, binary, more fields, not decimal, out of range)."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    fields = text.split()
    if not 1 <= len(fields) <= 2 or "\n" in text.strip():
        return None
    job = _number(fields[0])
    uid = _number(fields[1]) if len(fields) == 2 else ""
    if job is None or uid is None or job == "0":
        return None
    return JobHolder(job, uid)

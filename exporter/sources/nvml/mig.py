"""MIG through NVML: the GPU instances / compute instances of a MIG-enabled GPU.

When MIG is on, each MIG device (one compute instance inside one GPU instance) is read on its
own handle: IDs, UUID, GPU-instance profile, memory and processes. What NVML cannot give per
instance (utilisation: "On MIG-enabled GPUs, querying device utilization rates is not currently
supported") is left out, never estimated.

NVML calls and the behaviour relied on (nvml.h, "Multi Instance GPU Management" group):

- ``nvmlDeviceGetMigMode(h)`` -> ``[current, pending]``; NOT_SUPPORTED on GPUs without MIG. The
  current mode changes only with a GPU reset (after which the handle is re-acquired), so it is
  read once per handle (108 us on the H200) and costs nothing on MIG-off GPUs afterwards.
- ``nvmlDeviceGetMaxMigDeviceCount(h)``: "Returns zero if MIG is not supported or enabled".
- ``nvmlDeviceGetMigDeviceHandleByIndex(h, i)``: NOT_FOUND "if no valid MIG device was found at
  index" (indices are sparse: skipped), INVALID_ARGUMENT for an index past the end (skipped).
  Handles "may be reused and their properties can change", so the instances are enumerated on
  every collection (instances are created and destroyed without a reset).
- ``nvmlDeviceGetGpuInstanceId`` / ``nvmlDeviceGetComputeInstanceId`` on the MIG handle.
- ``nvmlDeviceGetUUID(mig)``: ``MIG-<uuid>``, "immutable for the lifetime of a MIG device".
- Profile name (cached per MIG UUID): the GPU instance's profile from
  ``nvmlDeviceGetGpuInstanceById`` ("Requires privileged user") -> ``nvmlGpuInstanceGetInfo``
  (``profileId``) -> the ``nvmlDeviceGetGpuInstanceProfileInfo(h, index, version=2)`` whose
  ``id`` matches (its ``name`` is ``"MIG 1g.18gb"``). Without privileges (NO_PERMISSION, asked
  once per GPU) the name of the MIG device (``nvmlDeviceGetName(mig)``, "When used with MIG
  device handles the API returns MIG device names", e.g. ``NVIDIA H200 MIG 1g.18gb``) gives it;
  a compute-instance prefix (``1c.3g.71gb``) is dropped so the label is the GPU instance's.
- ``nvmlDeviceGetMemoryInfo(mig)``: the GPU instance's memory (its compute instances share it).
- ``nvmlDeviceGetComputeRunningProcesses(mig)``: that instance's processes (host PIDs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from exporter.health import MigDevice, MigProcess
from exporter.sources.nvml.errors import Reaction, describe, raise_if_down
from exporter.sources.nvml.processes import clean_entries

log = logging.getLogger(__name__)

MIG_ENABLED: Final = 1  # NVML_DEVICE_MIG_ENABLE
INVALID_ARGUMENT: Final = 2
NO_PERMISSION: Final = 4
NOT_FOUND: Final = 6
NOT_SUPPORTED: Final = 3
UNKNOWN_PROFILE: Final = "unknown"
_PROFILE_INDICES: Final = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT in nvidia-ml-py 13.x


@dataclass(eq=False)
class _Read:
    """One GPU's MIG reading in one collection."""

    index: int
    parent: Any
    state: _ParentState
    errors: dict[str, int]
    list_processes: Callable[[Any], Sequence[Any]] | None = None


@dataclass(eq=False)
class _ParentState:
    asked: bool = False  # the mode was asked for this handle
    mig_enabled: bool | None = None  # None: the GPU has no MIG (NOT_SUPPORTED)
    profiles: dict[int, str] | None = None  # GPU-instance profile id -> name (privileged path)
    privileged: bool = True  # False once GpuInstanceById answered NO_PERMISSION
    unsupported: set[str] = field(default_factory=set)


class MigReader:
    """Reads MIG devices of parent GPUs, keyed by GPU index (``forget`` on re-acquisition).

    ``errors`` (passed per call) counts failed calls under ``mig_call``.

    Raises (from ``read``):
        GpuDown: the parent GPU is lost / needs a reset (the whole GPU reading is abandoned).
        NvmlFatal: NVML itself stopped working.
    """

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._error: type[BaseException] = nvml.NVMLError
        self._parents: dict[int, _ParentState] = {}
        self._profile_by_uuid: dict[str, str] = {}

    def forget(self, index: int) -> None:
        """The parent's handle was re-acquired (GPU reset): ask for its MIG mode again."""
        self._parents.pop(index, None)

    def enabled(self, index: int, handle: Any, errors: dict[str, int]) -> bool | None:
        """Whether MIG is on for this GPU (asked once per handle); None: no MIG on this GPU."""
        state = self._parents.setdefault(index, _ParentState())
        if not state.asked:
            mode = self._call(_Read(index, handle, state, errors), "nvmlDeviceGetMigMode", handle)
            if mode is None and "nvmlDeviceGetMigMode" not in state.unsupported:
                return None  # a transient failure: ask again next collection
            state.asked = True
            state.mig_enabled = None if mode is None else int(mode[0]) == MIG_ENABLED
            if state.mig_enabled:
                log.info("GPU %d: MIG is enabled; reading its instances", index)
        return state.mig_enabled

    def read(self, index: int, handle: Any, errors: dict[str, int],
             list_processes: Callable[[Any], Sequence[Any]] | None) -> tuple[MigDevice, ...] | None:
        """The MIG devices of one GPU; None when MIG is off (or not supported)."""
        if not self.enabled(index, handle, errors):
            return None
        read = _Read(index, handle, self._parents[index], errors, list_processes)
        count = self._call(read, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        devices: list[MigDevice] = []
        for slot in range(int(count)):
            mig = self._slot(handle, slot)
            if mig is None:
                continue
            device = self._device(read, mig)
            if device is not None:
                devices.append(device)
        devices.sort(key=lambda d: (d.gpu_instance, d.compute_instance))
        return tuple(devices)

    # --- one MIG device ------------------------------------------------------------------------
    def _slot(self, handle: Any, slot: int) -> Any:
        try:
            return self._nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except self._error as exc:
            code = getattr(exc, "value", None)
            if code in (NOT_FOUND, INVALID_ARGUMENT):  # an empty slot (indices are sparse)
                return None
            raise_if_down(exc)
            log.debug("MIG slot %d: %s", slot, describe(exc))
            return None

    def _device(self, read: _Read, mig: Any) -> MigDevice | None:
        gi = self._call(read, "nvmlDeviceGetGpuInstanceId", mig)
        ci = self._call(read, "nvmlDeviceGetComputeInstanceId", mig)
        uuid = self._call(read, "nvmlDeviceGetUUID", mig)
        if gi is None or ci is None or uuid is None:
            return None  # destroyed between enumeration and reading: gone next time
        uuid = str(uuid)
        profile = self._profile_by_uuid.get(uuid)
        if profile is None:
            profile = self._profile(read, int(gi), mig)
            self._profile_by_uuid[uuid] = profile
        memory = self._call(read, "nvmlDeviceGetMemoryInfo", mig)
        total = 0 if memory is None else int(memory.total)
        processes: tuple[MigProcess, ...] = ()
        if read.list_processes is not None:
            entries = self._guard(read, "processes", read.list_processes, mig)
            kept, garbled = clean_entries(entries or (), total)
            if garbled:
                read.errors["garbled_process_entry"] = (
                    read.errors.get("garbled_process_entry", 0) + garbled)
            processes = tuple(MigProcess(pid=pid, used_memory_bytes=used)
                              for pid, used in sorted(kept.items()))
        return MigDevice(
            gpu_instance=int(gi), compute_instance=int(ci), uuid=uuid, profile=profile,
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            processes=processes,
        )

    def _profile(self, read: _Read, gi: int, mig: Any) -> str:
        if read.state.privileged:
            name = self._profile_from_instance(read.state, read.parent, gi)
            if name is not None:
                return name
        device_name = self._call(read, "nvmlDeviceGetName", mig)
        name = profile_from_device_name(str(device_name)) if device_name else None
        if name is None:
            log.info("GPU %d: cannot tell the profile of MIG GPU instance %d", read.index, gi)
        return name or UNKNOWN_PROFILE

    def _profile_from_instance(self, state: _ParentState, parent: Any, gi: int) -> str | None:
        nvml = self._nvml
        try:
            instance = nvml.nvmlDeviceGetGpuInstanceById(parent, gi)
            profile_id = int(nvml.nvmlGpuInstanceGetInfo(instance).profileId)
        except self._error as exc:
            raise_if_down(exc)
            if getattr(exc, "value", None) in (NO_PERMISSION, NOT_SUPPORTED):
                state.privileged = False  # no GPU-instance access here: use device names
                log.info("MIG GPU-instance details need privileges (%s); profile names come "
                         "from MIG device names", describe(exc))
            return None
        except AttributeError:  # a binding without these functions
            state.privileged = False
            return None
        if state.profiles is None:
            state.profiles = self._profile_table(parent)
        return state.profiles.get(profile_id)

    def _profile_table(self, parent: Any) -> dict[int, str]:
        """GPU-instance profile id -> name, over every profile index this GPU supports."""
        nvml = self._nvml
        count = int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", _PROFILE_INDICES))
        table: dict[int, str] = {}
        for profile_index in range(count):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile_index, 2)
            except self._error as exc:
                raise_if_down(exc)
                if getattr(exc, "value", None) == INVALID_ARGUMENT:
                    break  # past the last index: "until the API returns INVALID_ARGUMENT"
                continue  # NOT_SUPPORTED: this GPU has no such profile
            name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            table[int(info.id)] = name.removeprefix("MIG ").strip()
        return table

    # --- error handling ------------------------------------------------------------------------
    def _call(self, read: _Read, name: str, *args: Any) -> Any:
        fn = getattr(self._nvml, name, None)
        if fn is None:
            read.state.unsupported.add(name)
            return None
        return self._guard(read, name, fn, *args)

    def _guard(self, read: _Read, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        state, errors = read.state, read.errors
        if name in state.unsupported:
            return None
        try:
            return fn(*args)
        except self._error as exc:
            if raise_if_down(exc) is Reaction.UNSUPPORTED:
                log.info("MIG: %s not supported (%s); not asking again", name, describe(exc))
                state.unsupported.add(name)
                return None
            # NOT_FOUND, INVALID_ARGUMENT: a MIG device destroyed meanwhile, not an error
            if getattr(exc, "value", None) not in (NOT_FOUND, INVALID_ARGUMENT):
                errors["mig_call"] = errors.get("mig_call", 0) + 1
            log.debug("MIG: %s failed: %s", name, describe(exc))
            return None


def profile_from_device_name(name: str) -> str | None:
    """``"NVIDIA H200 MIG 1g.18gb"`` -> ``"1g.18gb"``; ``"... MIG 1c.3g.71gb"`` -> ``"3g.71gb"``.

    None when the name carries no ``MIG`` part.
    """
    head, sep, profile = name.rpartition("MIG ")
    if not sep or (head and not head.endswith(" ")):
        return None
    profile = profile.strip()
    first, dot, rest = profile.partition(".")
    if dot and first.endswith("c") and first[:-1].isdigit() and "g." in rest:
        profile = rest  # a compute instance smaller than its GPU instance
    return profile or None


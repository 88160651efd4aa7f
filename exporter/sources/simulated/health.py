"""Simulated GPU health for scenarios: XIDs, row remapping, retired pages, MIG layouts.

Scenario keys (per GPU entry)::

    xids:                        # XIDs the driver reports (counted from the exporter's start)
      - {at: 20s, code: 79}
      - {at: 30s, code: 31, count: 600, every: 0.5s, gpu_instance: 7, compute_instance: 0}
    xid_events: false            # NVML refuses event registration (default true)
    remapped_rows: {corrected: 2, uncorrected: 1, pending_from: 40s, failure_from: 5m}
    retired_pages: {single_bit: 3, double_bit: 1, pending_from: 1m}   # GPUs before Ampere
    mig:                         # MIG on, with these GPU instances
      - {profile: 1g.18gb, gpu_instance: 7}
      - {profile: 3g.71gb, gpu_instance: 2, compute_instances: 2}
    nvlink:                      # NVLink errors and state per link (GPUs with NVLink)
      {links: 18, down: [7], faulty: [3], crc_per_hour: 1800}

and per process ``gpu_instance: 7`` (``compute_instance: 0``) to run inside a MIG instance.
Times are simulated seconds since the source started; XIDs before 0 are not counted (NVML does
not replay events from before registration).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from exporter.catalogue.metrics import nvlink as nvlink_rows
from exporter.health import MigDevice, MigProcess, RemappedRows, RetiredPages, XidKey, XidStat
from exporter.sources.simulated.scenario_fields import GiB, Reader, items

#: The per-GPU scenario keys this module reads.
HEALTH_KEYS = ("xids", "xid_events", "remapped_rows", "retired_pages", "mig", "nvlink")
XID_KEYS = ("at", "code", "count", "every", "gpu_instance", "compute_instance")
REMAP_KEYS = ("corrected", "uncorrected", "pending_from", "failure_from")
RETIRED_KEYS = ("single_bit", "double_bit", "pending_from")
MIG_KEYS = ("profile", "gpu_instance", "compute_instances", "memory")
NVLINK_KEYS = ("links", "down", "faulty", "crc_per_hour")
_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[+-][a-z.]+)?$")
MAX_GPU_INSTANCES = 7  # NVIDIA's MIG GPUs hold at most 7 GPU instances


@dataclass(frozen=True, slots=True)
class XidInjection:
    """One ``xids`` entry: XID ``code`` reported ``count`` times from ``at``, ``every`` apart."""

    at: float
    code: int
    count: int = 1
    every: float = 0.0  # seconds between repeats
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class RemapSpec:
    """``remapped_rows``: rows remapped so far, and from when a remap is pending or failed."""

    corrected: int = 0
    uncorrected: int = 0
    pending_from: float | None = None
    failure_from: float | None = None


@dataclass(frozen=True, slots=True)
class RetiredSpec:
    """``retired_pages`` (GPUs before Ampere): pages retired so far, and from when one is
    pending."""

    single_bit: int = 0
    double_bit: int = 0
    pending_from: float | None = None


@dataclass(frozen=True, slots=True)
class MigSpec:
    """One ``mig`` entry: a GPU instance of a profile, split into compute instances."""

    profile: str
    gpu_instance: int
    compute_instances: int = 1
    memory_bytes: int = 0


@dataclass(frozen=True, slots=True)
class NvlinkSpec:
    """``nvlink``: the GPU's links; ``down`` ones are inactive after one recovery; ``faulty``
    ones count CRC errors at ``crc_per_hour`` (a replay per 8, a data CRC error per 50 on links
    0-11); the rest are active and clean."""

    links: int
    down: tuple[int, ...] = ()
    faulty: tuple[int, ...] = ()
    crc_per_hour: float = 0.0


@dataclass(frozen=True, slots=True)
class HealthSpec:
    """Everything health-related of one simulated GPU (the defaults: a healthy GPU)."""

    xids: tuple[XidInjection, ...] = ()
    xid_events: bool = True
    remapped_rows: RemapSpec | None = None
    retired_pages: RetiredSpec | None = None
    mig: tuple[MigSpec, ...] | None = None  # None: MIG off
    nvlink: NvlinkSpec | None = None  # None: no NVLink series


# --- parsing ------------------------------------------------------------------------------------
def parse_health(r: Reader, memory_total: int, remapping: bool, mig: bool = True,
                 nvlink_links: int = 0) -> HealthSpec:
    """The health keys of one GPU entry (``remapping``: the model remaps rows, Ampere+;
    ``mig``: the model supports MIG; ``nvlink_links``: the model's NVLink links, 0: none).

    Raises:
        ScenarioError: an invalid field (the message names it).
    """
    xids = []
    for j, item in enumerate(items(r.raw("xids"), r, "xids")):
        sub = Reader(item, r.origin, f"{r.path}.xids[{j}]", XID_KEYS)
        count = sub.integer("count", 1, low=1)
        every = sub.seconds("every", 0.0) or 0.0
        if count > 1 and every <= 0:
            sub.fail("a repeated XID needs every > 0", "every")
        gi = sub.integer("gpu_instance", -1) if sub.has("gpu_instance") else None
        xids.append(XidInjection(
            at=sub.seconds("at", 0.0, negative=True) or 0.0, code=sub.integer("code", 0, low=1),
            count=count, every=every, gpu_instance=gi,
            compute_instance=(sub.integer("compute_instance", 0) if gi is not None else None)))
    remap = None
    if r.has("remapped_rows"):
        if not remapping:
            r.fail("this GPU model does not remap rows (before Ampere): use retired_pages",
                   "remapped_rows")
        sub = Reader(r.raw("remapped_rows"), r.origin, f"{r.path}.remapped_rows", REMAP_KEYS)
        remap = RemapSpec(sub.integer("corrected", 0), sub.integer("uncorrected", 0),
                          sub.seconds("pending_from", None, negative=True),
                          sub.seconds("failure_from", None, negative=True))
    retired = None
    if r.has("retired_pages"):
        if remapping:
            r.fail("this GPU model remaps rows instead of retiring pages: use remapped_rows",
                   "retired_pages")
        sub = Reader(r.raw("retired_pages"), r.origin, f"{r.path}.retired_pages", RETIRED_KEYS)
        retired = RetiredSpec(sub.integer("single_bit", 0), sub.integer("double_bit", 0),
                              sub.seconds("pending_from", None, negative=True))
    return HealthSpec(xids=tuple(sorted(xids, key=lambda x: x.at)),
                      xid_events=_flag(r, "xid_events", True), remapped_rows=remap,
                      retired_pages=retired, mig=_parse_mig(r, memory_total, mig),
                      nvlink=_parse_nvlink(r, nvlink_links))


def _parse_nvlink(r: Reader, model_links: int) -> NvlinkSpec | None:
    if r.raw("nvlink") is None:
        return None
    if not model_links:
        r.fail("this GPU model has no NVLink", "nvlink")
    sub = Reader(r.raw("nvlink"), r.origin, f"{r.path}.nvlink", NVLINK_KEYS)
    links = sub.integer("links", model_links, low=1)
    if links > nvlink_rows.MAX_LINKS:
        sub.fail(f"at most {nvlink_rows.MAX_LINKS} links", "links")
    chosen: dict[str, tuple[int, ...]] = {}
    for key in ("down", "faulty"):
        found = []
        for j, item in enumerate(items(sub.raw(key), sub, key)):
            if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item < links:
                sub.fail(f"item {j}: expected a link number from 0 to {links - 1}", key)
            found.append(item)
        chosen[key] = tuple(found)
    rate = sub.raw("crc_per_hour")
    if rate is not None and (not isinstance(rate, (int, float)) or isinstance(rate, bool)
                             or rate < 0):
        sub.fail("expected a number of errors per hour, 0 or more", "crc_per_hour")
    return NvlinkSpec(links, chosen["down"], chosen["faulty"], float(rate or 0.0))


def _flag(r: Reader, key: str, default: bool) -> bool:
    value = r.raw(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        r.fail(f"expected true or false, got {value!r}", key)
    return value


def _parse_mig(r: Reader, memory_total: int, capable: bool) -> tuple[MigSpec, ...] | None:
    if r.raw("mig") is None:
        return None
    if not capable:
        r.fail("this GPU model has no MIG (A100, H100 and H200 have)", "mig")
    specs: list[MigSpec] = []
    for j, item in enumerate(items(r.raw("mig"), r, "mig")):
        sub = Reader(item, r.origin, f"{r.path}.mig[{j}]", MIG_KEYS)
        profile = sub.text("profile", required=True) or ""
        match = _PROFILE.match(profile)
        if match is None or match.group(1):
            sub.fail(f"expected a GPU instance profile such as 1g.18gb, got {profile!r}",
                     "profile")
        assert match is not None
        gi = sub.integer("gpu_instance", len(specs) + 1)
        if any(s.gpu_instance == gi for s in specs):
            sub.fail(f"GPU instance {gi} appears twice", "gpu_instance")
        default_memory = min(int(match.group(3)) * GiB, memory_total)
        specs.append(MigSpec(profile=profile, gpu_instance=gi,
                             compute_instances=sub.integer("compute_instances", 1, low=1),
                             memory_bytes=sub.size("memory", default_memory)))
    if len(specs) > MAX_GPU_INSTANCES:
        r.fail(f"at most {MAX_GPU_INSTANCES} GPU instances per GPU", "mig")
    if sum(s.memory_bytes for s in specs) > memory_total:
        r.fail("the GPU instances' memory exceeds the GPU's", "mig")
    return tuple(specs)


# --- evaluation at simulated time t ---------------------------------------------------------------
def xid_counts(injections: Iterable[XidInjection], t: float, started_at: float,
               speed: float = 1.0) -> Mapping[XidKey, XidStat]:
    """XIDs seen between the start (t = 0) and ``t``, with the Unix time of the last one.

    ``started_at`` is the Unix time of simulated t = 0; simulated time runs ``speed`` times
    faster than the wall clock.
    """
    counts: dict[XidKey, XidStat] = {}
    for x in injections:
        # Occurrence k (0 .. count-1) happens at x.at + k * every; only those in [0, t] count.
        if x.every > 0:
            k_first = max(0, math.ceil(-x.at / x.every))
            k_last = min(x.count - 1, math.floor((t - x.at) / x.every))
        elif 0 <= x.at <= t:
            k_first = k_last = 0
        else:
            continue
        if k_last < k_first:
            continue
        last = started_at + (x.at + k_last * x.every) / speed
        key = XidKey(x.code, x.gpu_instance, x.compute_instance)
        old = counts.get(key)
        counts[key] = XidStat(count=k_last - k_first + 1 + (old.count if old else 0),
                              last_seconds=max(last, old.last_seconds if old else 0.0))
    return MappingProxyType(counts)


def remapped_rows(spec: RemapSpec | None, t: float, mig_on: bool) -> RemappedRows | None:
    """The remap state at ``t`` (None: not reported, as NVML answers with MIG on)."""
    if spec is None or mig_on:
        return None
    return RemappedRows(
        corrected=spec.corrected, uncorrected=spec.uncorrected,
        pending=spec.pending_from is not None and t >= spec.pending_from,
        failure=spec.failure_from is not None and t >= spec.failure_from)


def retired_pages(spec: RetiredSpec | None, t: float) -> RetiredPages | None:
    if spec is None:
        return None
    return RetiredPages(single_bit=spec.single_bit, double_bit=spec.double_bit,
                        pending=spec.pending_from is not None and t >= spec.pending_from)


def nvlink_values(spec: NvlinkSpec, t: float) -> dict[str, dict[str, float]]:
    """The NVLink rows' values at ``t`` (simulated seconds since the start), by row name."""
    crc = math.floor(spec.crc_per_hour * max(t, 0.0) / 3600.0)
    values: dict[str, dict[str, float]] = {}
    for link in range(spec.links):
        label = str(link)
        errors = crc if link in spec.faulty else 0
        counts = {
            nvlink_rows.NVLINK_CRC_FLIT_ERRORS.name: errors,
            nvlink_rows.NVLINK_REPLAY_ERRORS.name: errors // 8,
            nvlink_rows.NVLINK_RECOVERY_ERRORS.name: 1 if link in spec.down else 0,
            nvlink_rows.NVLINK_STATE.name: 0 if link in spec.down else 1,
        }
        if link < 12:  # per-link data CRC fields exist for links 0-11 only
            counts[nvlink_rows.NVLINK_CRC_DATA_ERRORS.name] = errors // 50
        for name, value in counts.items():
            values.setdefault(name, {})[label] = float(value)
    return values


def mig_devices(specs: tuple[MigSpec, ...] | None, gpu_index: int,
                processes: Mapping[tuple[int, int], list[MigProcess]]) -> tuple[MigDevice, ...]:
    """The MIG devices of one GPU; ``processes`` by (gpu_instance, compute_instance)."""
    devices: list[MigDevice] = []
    for spec in specs or ():
        used = sum(p.used_memory_bytes or 0 for ci in range(spec.compute_instances)
                   for p in processes.get((spec.gpu_instance, ci), []))
        used = min(spec.memory_bytes, used + (16 << 20))  # the instance's own small reserve
        for ci in range(spec.compute_instances):
            devices.append(MigDevice(
                gpu_instance=spec.gpu_instance, compute_instance=ci,
                uuid=f"MIG-{gpu_index:08x}-{spec.gpu_instance:04x}-{ci:04x}-5000-000000000000",
                profile=spec.profile, memory_used_bytes=used,
                memory_total_bytes=spec.memory_bytes,
                processes=tuple(processes.get((spec.gpu_instance, ci), []))))
    return tuple(sorted(devices, key=lambda d: (d.gpu_instance, d.compute_instance)))

"""GPU models the simulated source knows: sizes, power, clocks and features as NVML reports them."""

from __future__ import annotations

from dataclasses import dataclass, replace

_MIB = 1 << 20
_MHZ = 1_000_000.0


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Static facts of one GPU model (totals are what NVML reports, not the marketing size)."""

    name: str
    memory_bytes: int
    reserved_bytes: int  # driver/firmware reserve (NVML memory info v2)
    power_limit_watts: float  # default enforced limit
    idle_watts: float
    sm_clock_max_hertz: float
    sm_clock_idle_hertz: float
    memory_clock_max_hertz: float
    memory_clock_idle_hertz: float
    has_fan: bool  # data-centre boards are passively cooled: NVML answers NOT_SUPPORTED
    ecc: bool  # GeForce boards have no ECC counters
    busy_pstate: int  # P-state with a compute context (GeForce cards sit in P2)
    slowdown_celsius: float  # software thermal slowdown starts here
    hw_slowdown_celsius: float  # hardware thermal slowdown (close to shutdown)
    pcie_bytes_per_second: float  # practical PCIe bandwidth per direction
    mig: bool = False  # MIG-capable (A100, H100, H200)
    row_remapping: bool = False  # repairs memory by row remapping (Ampere+ data-centre GPUs)
    gpm: bool = False  # GPU Performance Monitoring (Hopper and newer)
    nvlink_bytes_per_second: float = 0.0  # NVLink bandwidth per direction (0: no NVLink)
    nvlink_links: int = 0  # NVLink links (0: none)


def _model(  # noqa: PLR0917 - one row of the table below
    name: str, memory_mib: int, reserved_mib: int, watts: float, idle: float,
           sm: tuple[int, int], mem: tuple[int, int], fan: bool, ecc: bool, pstate: int,
           slowdown: float, hw: float, pcie_gbps: float) -> GpuModel:
    return GpuModel(
        name=name, memory_bytes=memory_mib * _MIB, reserved_bytes=reserved_mib * _MIB,
        power_limit_watts=watts, idle_watts=idle,
        sm_clock_max_hertz=sm[0] * _MHZ, sm_clock_idle_hertz=sm[1] * _MHZ,
        memory_clock_max_hertz=mem[0] * _MHZ, memory_clock_idle_hertz=mem[1] * _MHZ,
        has_fan=fan, ecc=ecc, busy_pstate=pstate, slowdown_celsius=slowdown,
        hw_slowdown_celsius=hw, pcie_bytes_per_second=pcie_gbps * 1e9,
    )


#: MIG-capable models, and models that repair memory by row remapping (Ampere and newer
#: data-centre GPUs; GeForce boards answer the call without meaningful data, older ones retire
#: pages instead).
_MIG = frozenset({"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-40GB",
                  "NVIDIA A100-SXM4-80GB"})
_ROW_REMAPPING = _MIG | {"NVIDIA L40S", "NVIDIA RTX A6000"}
#: Models with GPM (Hopper), and their NVLink bandwidth per direction (the SXM H100 has 18
#: links; the H200 here is a board without links, as on the machine the project verifies on).
_GPM = frozenset({"NVIDIA H100 80GB HBM3", "NVIDIA H200"})
_NVLINK = {"NVIDIA H100 80GB HBM3": 450e9}
_NVLINK_LINKS = {"NVIDIA H100 80GB HBM3": 18}

#: Known models by the name NVML reports.
GPU_MODELS: dict[str, GpuModel] = {
    m.name: replace(m, mig=m.name in _MIG, row_remapping=m.name in _ROW_REMAPPING,
                    gpm=m.name in _GPM, nvlink_bytes_per_second=_NVLINK.get(m.name, 0.0),
                    nvlink_links=_NVLINK_LINKS.get(m.name, 0))
    for m in (
        _model("NVIDIA H100 80GB HBM3", 81559, 529, 700, 72, (1980, 345), (2619, 2619),
               False, True, 0, 87, 92, 50),
        _model("NVIDIA H200", 143771, 573, 700, 76, (1980, 345), (3201, 3201),
               False, True, 0, 87, 92, 50),
        _model("NVIDIA A100-SXM4-40GB", 40960, 437, 400, 55, (1410, 210), (1215, 1215),
               False, True, 0, 86, 92, 25),
        _model("NVIDIA A100-SXM4-80GB", 81920, 512, 400, 60, (1410, 210), (1593, 1593),
               False, True, 0, 86, 92, 25),
        _model("NVIDIA L40S", 46068, 465, 350, 35, (2520, 210), (9001, 405),
               False, True, 0, 88, 93, 25),
        _model("NVIDIA RTX A6000", 49140, 410, 300, 24, (2100, 210), (8001, 405),
               True, False, 2, 88, 93, 25),
        _model("NVIDIA GeForce RTX 4090", 24564, 330, 450, 20, (2520, 210), (10501, 405),
               True, False, 2, 88, 93, 25),
        _model("NVIDIA GeForce RTX 3090", 24576, 270, 350, 22, (1995, 210), (9751, 405),
               True, False, 2, 88, 93, 12),
        _model("Tesla T4", 15360, 261, 70, 10, (1590, 300), (5001, 405),
               False, True, 0, 85, 90, 12),
    )
}

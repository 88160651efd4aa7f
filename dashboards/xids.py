"""What the common XID codes mean and who acts on them: one table for the alerts and the runbook.

Sources: NVIDIA's Xid catalog (Ampere and later: mnemonic, resolution buckets RESTART_APP /
RESET_GPU / RESTART_BM / CONTACT_SUPPORT / IGNORE) and the legacy Xid table's cause columns
(https://docs.nvidia.com/deploy/xid-errors/), NVIDIA's k8s-device-plugin (13, 31, 43, 45, 68,
109 do not mark a device unhealthy), collected in shared/research/nvml-health-mig-xid.md.
``Who`` says who acts first: the job's owner (``application``), the node's operator
(``operator``: reset, drain, reboot), or the vendor (``hardware``: diagnostics, RMA).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class XidClass(str, Enum):
    """How the alerts treat an XID."""

    APPLICATION = "application"  # the job's own fault; the GPU stays healthy
    HARDWARE = "hardware"  # hardware fault or data loss: page someone at once
    DRIVER = "driver"  # driver/firmware trouble: reset, then investigate if it repeats
    INFORMATIONAL = "informational"  # accompanies other XIDs or records a repair


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    name: str  # NVIDIA's mnemonic
    kind: XidClass
    meaning: str
    action: str  # what to do, and who


XIDS: tuple[Xid, ...] = (
    Xid(13, "GR_EXCEPTION", XidClass.APPLICATION,
        "Graphics engine exception: usually the application (out-of-bounds access, illegal "
        "instruction); rarely hardware.",
        "Job owner: fix the code (run it under compute-sanitizer), restart the job. If it "
        "repeats on one GPU with different jobs: operator runs DCGM diagnostics."),
    Xid(31, "FIFO_ERROR_MMU_ERR_FLT", XidClass.APPLICATION,
        "GPU memory page fault: the application touched an address it does not own (or a "
        "driver bug).",
        "Job owner: fix and restart (CUDA reports an illegal memory access). Repeating on one "
        "GPU with different jobs: operator runs diagnostics."),
    Xid(43, "RESETCHANNEL_VERIF_ERROR", XidClass.APPLICATION,
        "GPU stopped processing: the application hit a software-induced fault and was "
        "terminated. The GPU remains healthy.",
        "Job owner: see the job's own error; nothing to do on the GPU."),
    Xid(45, "PREEMPTIVE_REMOVAL", XidClass.INFORMATIONAL,
        "Preemptive cleanup: a job was aborted (Ctrl-C, kill, GPU reset) or cleaned up after "
        "another XID.",
        "Alone: nothing. With other XIDs: follow those."),
    Xid(48, "GPU_ECC_DBE", XidClass.HARDWARE,
        "Double-bit (uncorrectable) ECC error in GPU memory: data was lost.",
        "Operator: drain and reset the GPU (a reset or reboot clears it); with 63/64 see "
        "row remapping. Repeats: vendor diagnostics / RMA."),
    Xid(61, "PMU_BREAKPOINT", XidClass.DRIVER,
        "Internal micro-controller breakpoint/warning (pre-Ampere GPUs).",
        "Operator: reset the GPU if it misbehaves; report to NVIDIA if it repeats."),
    Xid(62, "PMU_HALT_ERROR", XidClass.HARDWARE,
        "Internal micro-controller halted (hardware, driver or thermal).",
        "Operator: reset the GPU; check cooling; contact support if it repeats."),
    Xid(63, "INFOROM_DRAM_RETIREMENT_EVENT", XidClass.INFORMATIONAL,
        "A row remap (Ampere+) or page retirement (older) was recorded after ECC errors.",
        "Operator: reset the GPU when convenient so the remap takes effect "
        "(see GpuRowRemapPending)."),
    Xid(64, "INFOROM_DRAM_RETIREMENT_FAILURE", XidClass.HARDWARE,
        "Recording a row remap / page retirement failed.",
        "Operator: drain and reset; vendor: likely RMA (see GpuRowRemapFailed)."),
    Xid(68, "NVDEC0_ERROR", XidClass.APPLICATION,
        "Video decoder exception.",
        "Job owner: restart the job; repeats across jobs: contact support."),
    Xid(69, "GR_CLASS_ERROR", XidClass.DRIVER,
        "Graphics engine class error (hardware or driver).",
        "Job owner restarts; operator checks the application's CUDA/driver versions."),
    Xid(74, "NVLINK_ERROR", XidClass.HARDWARE,
        "NVLink error (link hardware, or the GPU at the other end failed).",
        "Operator: drain; a GPU reset or node reboot clears it; check both ends; vendor if it "
        "repeats."),
    Xid(79, "GPU_HAS_FALLEN_OFF_THE_BUS", XidClass.HARDWARE,
        "The GPU fell off the PCIe bus (link, power or GPU failure): it no longer answers.",
        "Operator: drain and reboot the node; vendor: check the PCIe slot, risers, power."),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", XidClass.INFORMATIONAL,
        "High rate of single-bit (corrected) ECC errors.",
        "Operator: watch gpu_ecc_errors_total{type=\"corrected\"}; contact support if it "
        "persists."),
    Xid(94, "CONTAINED_ERROR", XidClass.HARDWARE,
        "Uncorrectable memory error contained to one application: that job's data was lost; "
        "others are unaffected.",
        "Job owner restarts the job; operator resets the GPU when convenient."),
    Xid(95, "UNCONTAINED_ERROR", XidClass.HARDWARE,
        "Uncorrectable memory error that may affect every application on the GPU.",
        "Operator: drain and reset the GPU before jobs restart."),
    Xid(109, "CTXSW_TIMEOUT_ERROR", XidClass.DRIVER,
        "Context switch timeout.",
        "Operator: reset the GPU; contact support if it repeats."),
    Xid(119, "GSP_RPC_TIMEOUT", XidClass.HARDWARE,
        "The GPU System Processor (firmware) timed out: the GPU may stop answering.",
        "Operator: drain and reset the GPU (power-cycle the node if it persists); update the "
        "driver; report to NVIDIA."),
    Xid(120, "GSP_ERROR", XidClass.HARDWARE,
        "Error in code running on the GPU System Processor.",
        "Operator: as for 119."),
    Xid(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", XidClass.HARDWARE,
        "Uncorrectable memory errors the driver could not contain by remapping or offlining.",
        "Operator: drain and reset; vendor if it persists."),
    Xid(154, "GPU_RECOVERY_ACTION_CHANGED", XidClass.INFORMATIONAL,
        "The driver states what recovery the accompanying XIDs need (none, reset, reboot, "
        "drain).",
        "Operator: follow the action in the kernel log line."),
)

BY_CODE: dict[int, Xid] = {x.code: x for x in XIDS}


def codes(kind: XidClass) -> tuple[int, ...]:
    """The XID codes of one class, ascending."""
    return tuple(x.code for x in XIDS if x.kind is kind)


def regex(kind: XidClass) -> str:
    """A PromQL regex matching the ``xid`` label of one class (e.g. ``"13|31|43|68"``)."""
    return "|".join(str(c) for c in codes(kind))


def markdown_table() -> str:
    """The runbook's XID table."""
    rows = ["| XID | NVIDIA name | class | meaning | what to do, who acts |",
            "|---|---|---|---|---|"]
    rows += [f"| {x.code} | `{x.name}` | {x.kind.value} | {x.meaning} | {x.action} |"
             for x in XIDS]
    return "\n".join(rows)


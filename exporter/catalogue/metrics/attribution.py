"""Rows of who was *given* a GPU: the kubelet's allocations (PodResources API) and Slurm's
(the prolog's allocation files).

Process series carry who *uses* a GPU (``exporter.catalogue.metrics.process``, labels from the
process's cgroup); these rows carry the allocation, one series per (device, pod container or
Slurm job), and the health of the PodResources poller. docs/attribution.md §4 explains the
labels, docs/slurm.md Slurm's.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import GPU_LABELS, Group, Kind, Metric, Scope
from exporter.catalogue.workloads import KINDS, allocation_label_names, label_names

#: The workload labels of ``gpu_allocation_info``: every kind's ``allocation_labels`` (pods:
#: namespace, pod, container; Slurm jobs: slurm_job, user, uid), "" where another kind's.
ALLOCATION_WORKLOAD_LABELS: tuple[str, ...] = allocation_label_names(KINDS)
#: Labels of ``gpu_allocation_info``.
ALLOCATION_LABELS: tuple[str, ...] = (*GPU_LABELS, "device_id", "gpu_instance", "resource",
                                      *ALLOCATION_WORKLOAD_LABELS, "sharing")

ALLOCATION_INFO = Metric(
    "gpu_allocation_info", Kind.INFO, Group.PROCESSES,
    "A device the kubelet allocated to a pod's container (PodResources API), or Slurm to a job "
    "(the prolog's allocation file: slurm_job, and its owner's user and uid). device_id is the "
    "device's id (GPU-/MIG-), gpu/uuid the (parent) GPU, gpu_instance the MIG GPU instance; "
    "resource the device plugin's resource or gres/gpu; sharing is exclusive, or shared for "
    "time-sliced/MPS replicas and devices listed for several containers. Value is always 1.",
    labels=ALLOCATION_LABELS, scope=Scope.ALLOCATION,
)
#: Labels of ``gpu_allocation_claim_info``.
CLAIM_LABELS: tuple[str, ...] = (*GPU_LABELS, "namespace", "pod", "container", "claim_namespace",
                                 "claim", "driver", "pool", "device")

ALLOCATION_CLAIM_INFO = Metric(
    "gpu_allocation_claim_info", Kind.INFO, Group.PROCESSES,
    "A device a Dynamic Resource Allocation claim gave a pod's container (PodResources API): "
    "the ResourceClaim (claim_namespace, claim), its driver, pool and device, joined to the "
    "GPU as in gpu_allocation_info (which lists the same allocation with resource=driver and "
    "device_id=device). Value is always 1. dcgm-exporter: the dra_claim_* labels.",
    labels=CLAIM_LABELS, scope=Scope.ALLOCATION,
)
#: The per-workload families carry the labels of every workload kind (those switched on).
_WORKLOAD_LABELS = (*GPU_LABELS, *label_names(KINDS))

WORKLOAD_MEMORY = Metric(
    "gpu_workload_memory_used_bytes", Kind.GAUGE, Group.PROCESSES,
    "GPU memory held by all processes of one workload (pod, container or Slurm job, from "
    "their cgroups) on this GPU, in bytes: exact on shared GPUs too. Labels as switched on "
    "(--kubernetes, --containers, --slurm); host processes are not counted here.",
    labels=_WORKLOAD_LABELS, scope=Scope.GPU_SUMMARY,
)
WORKLOAD_UTILIZATION = Metric(
    "gpu_workload_utilization_ratio", Kind.GAUGE, Group.PROCESS_UTILIZATION,
    "Summed SM utilisation samples (0-1) of one workload's processes on this GPU: its share "
    "of a time-sliced GPU.",
    labels=_WORKLOAD_LABELS, scope=Scope.GPU_SUMMARY,
)
POD_RESOURCES_UP = Metric(
    "gpu_exporter_pod_resources_up", Kind.GAUGE, Group.EXPORTER,
    "1 if the last poll of the kubelet's PodResources API succeeded, else 0 (present only "
    "while allocations are polled).",
    labels=(), scope=Scope.EXPORTER,
)
POD_RESOURCES_STATUS = Metric(
    "gpu_exporter_pod_resources_status", Kind.GAUGE, Group.EXPORTER,
    "Outcome of the last PodResources poll, as a label (ok, socket_missing, permission_denied, "
    "unavailable, timeout, too_large, rejected, unimplemented, error); value is always 1.",
    labels=("status",), scope=Scope.EXPORTER,
)

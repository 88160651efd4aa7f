"""Rows of who was *given* a GPU: the kubelet's allocations (PodResources API).

Process series carry who *uses* a GPU (``exporter.metrics.process``, labels from the
process's cgroup); these rows carry the allocation, one series per (device, container), and
the health of the PodResources poller. docs/attribution.md §4 explains the labels.
"""

from __future__ import annotations

from exporter.metrics.core import GPU_LABELS, Group, Kind, Metric, Scope

#: Labels of ``gpu_allocation_info``.
ALLOCATION_LABELS: tuple[str, ...] = (*GPU_LABELS, "device_id", "gpu_instance", "resource",
                                      "namespace", "pod", "container", "sharing")

ALLOCATION_INFO = Metric(
    "gpu_allocation_info", Kind.INFO, Group.PROCESSES,
    "A device the kubelet allocated to a pod's container (PodResources API). device_id is the "
    "device plugin's id (GPU-/MIG-), gpu/uuid the (parent) GPU, gpu_instance the MIG GPU "
    "instance; sharing is exclusive, or shared for time-sliced/MPS replicas and devices listed "
    "for several containers. Value is always 1.",
    labels=ALLOCATION_LABELS, scope=Scope.ALLOCATION,
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

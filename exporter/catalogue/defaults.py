"""Defaults and bounds of the Kubernetes and container attribution flags.

Declared here, apart from the code that uses them (``exporter.attribution.podresources.client``,
``exporter.attribution.container_names``), so that the configuration and the flag values,
imported at every start, import none of that code: without ``--kubernetes`` and
``--containers`` it is never loaded (~0.3 MB resident, ``bench/bench_memory.py``).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_DOCKER_ROOT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_PODMAN_STORAGE",
    "DEFAULT_SOCKET",
    "MAX_MESSAGE_BYTES_LIMIT",
    "MIN_INTERVAL_SECONDS",
    "MIN_MESSAGE_BYTES",
    "check_max_message_bytes",
]

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MIN_MESSAGE_BYTES = 64 * 1024
MAX_MESSAGE_BYTES_LIMIT = 256 * 1024 * 1024
MIN_INTERVAL_SECONDS = 1.0
DEFAULT_DOCKER_ROOT = "/var/lib/docker"
DEFAULT_PODMAN_STORAGE = "/var/lib/containers/storage"


def check_max_message_bytes(value: int) -> int:
    """Validate a PodResources receive limit. Raises ValueError with a message for users."""
    if not MIN_MESSAGE_BYTES <= value <= MAX_MESSAGE_BYTES_LIMIT:
        raise ValueError(
            f"PodResources receive limit must be between {MIN_MESSAGE_BYTES} and "
            f"{MAX_MESSAGE_BYTES_LIMIT} bytes, got {value}"
        )
    return value

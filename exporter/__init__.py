"""gpu-exporter: a Prometheus exporter for NVIDIA GPUs, centred on who holds GPU memory."""

__version__ = "0.1.0"

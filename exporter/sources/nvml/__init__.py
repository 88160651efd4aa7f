"""NVML source: real GPUs through nvidia-ml-py (``pynvml``)."""

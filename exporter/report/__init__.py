"""``gpu-exporter report``: idle GPU-hours and GiB-hours per user, pod and job, from Prometheus."""

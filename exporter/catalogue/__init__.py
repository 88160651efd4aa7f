"""The catalogue: the declarations everything else follows from, and nothing that does I/O.

- ``metrics``: one row per metric (name, type, group, labels, NVML read, JSON field, ...);
- ``workloads``: one row per workload kind, next to the parser of its cgroup paths;
- ``thresholds``: every alert threshold and duration;
- ``records``: the idle-accounting recording rules' names, shared by the rules and the report;
- ``defaults``: the defaults and bounds of the attribution flags.

This package is the bottom layer: it imports nothing else of the project, and the sources,
attribution, exposition, the dashboards and the report import it (``tests/test_layers.py``).
It imports none of its modules here, so that reading one table loads only that table.
"""

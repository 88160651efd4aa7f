"""Grafana dashboards and Prometheus rules for gpu-exporter, generated from Python.

``python -m dashboards.generate`` writes ``dashboards/grafana/*.json`` and
``dashboards/rules/*.yaml``; ``--check`` fails when the committed files differ. Metric names come
from ``exporter.catalogue`` and thresholds from ``dashboards.thresholds``.
"""

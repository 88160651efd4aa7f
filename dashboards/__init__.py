"""Grafana dashboards and Prometheus rules for gpu-exporter, generated from Python.

``python -m dashboards.generate`` writes ``dashboards/grafana/*.json`` and
``dashboards/rules/*.yaml``; ``--check`` fails when the committed files differ. Metric names come
from the metric rows (``exporter.catalogue.metrics``) and thresholds from
``exporter.catalogue.thresholds``.
"""

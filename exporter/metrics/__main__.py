"""``python -m exporter.metrics``: print the README's metric table."""

from exporter.metrics import markdown_table

print(markdown_table())

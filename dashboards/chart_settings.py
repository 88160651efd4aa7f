"""The Helm chart's side of the site settings: its values' defaults and their schema, both
generated from the settings table (``exporter.catalogue.settings``), so that the chart takes
exactly the keys a settings file takes, with the defaults of ``thresholds.py``.

- ``values.yaml``: the ``thresholds`` and ``selectors`` maps under ``prometheusRule``, between
  ``# BEGIN SETTINGS`` and ``# END SETTINGS`` (every key with its default and meaning);
- ``values.schema.json``: ``prometheusRule.thresholds``, ``.selectors`` and ``.cost``, with
  each setting's type and range (a wrong value fails ``helm install`` naming the key).
"""

from __future__ import annotations

import json
import re
from typing import Any

from dashboards.promql import num
from exporter.catalogue.settings import (
    CURRENCY_PATTERN,
    DURATION_PATTERN,
    NAME_PATTERN,
    SECTIONS,
    SETTINGS,
    TEXT_PATTERN,
)
from exporter.catalogue.settings import Kind as SettingKind

__all__ = ["SettingsMarkerError", "render_schema", "render_values", "settings_table"]

_BEGIN = re.compile(r"^( *)# BEGIN SETTINGS\b[^\n]*\n(.*?)^ *# END SETTINGS$",
                    re.MULTILINE | re.DOTALL)


class SettingsMarkerError(ValueError):
    """values.yaml lacks its one BEGIN/END SETTINGS pair."""


def _yaml_value(value: float | str) -> str:
    return json.dumps(value) if isinstance(value, str) else num(value)


def render_values(text: str) -> str:
    """values.yaml with the settings block rewritten (indented as its BEGIN marker).

    Raises:
        SettingsMarkerError: not exactly one marker pair.
    """
    found = _BEGIN.findall(text)
    if len(found) != 1:
        raise SettingsMarkerError(f"values.yaml: expected one '# BEGIN SETTINGS' ... "
                                  f"'# END SETTINGS' pair, found {len(found)}")
    indent = found[0][0]
    lines = []
    for section in SECTIONS:
        lines.append(f"{indent}{section}:")
        for setting in (s for s in SETTINGS if s.section == section):
            lines.append(f"{indent}  # {setting.help}")
            lines.append(f"{indent}  {setting.key}: {_yaml_value(setting.default)}")
    block = "\n".join(lines) + "\n"

    def replace(match: re.Match[str]) -> str:
        head, _, _ = match.group(0).partition("\n")
        return f"{head}\n{block}{indent}# END SETTINGS"

    return _BEGIN.sub(replace, text)


def _anchored(pattern: re.Pattern[str]) -> str:
    return f"^{pattern.pattern}$"


def _schema(kind: SettingKind, description: str) -> dict[str, Any]:
    numbers: dict[SettingKind, dict[str, Any]] = {
        SettingKind.RATIO: {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        SettingKind.CELSIUS: {"type": "number", "exclusiveMinimum": 0, "maximum": 150},
        SettingKind.BYTES: {"type": "integer", "minimum": 0, "maximum": 2**53},
        SettingKind.SECONDS: {"type": "number", "exclusiveMinimum": 0, "maximum": 1e9},
        SettingKind.COUNT: {"type": "integer", "minimum": 0, "maximum": 10**9},
        SettingKind.DURATION: {"type": "string", "pattern": _anchored(DURATION_PATTERN)},
        SettingKind.REGEX: {"type": "string", "pattern": _anchored(TEXT_PATTERN)},
    }
    return {"description": description, **numbers[kind]}


def _object(properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, **more, "properties": properties}


def _names() -> dict[str, Any]:
    name = {"type": "string", "pattern": _anchored(NAME_PATTERN)}
    return {"type": "object", "propertyNames": name, "additionalProperties": name}


def settings_schema() -> dict[str, dict[str, Any]]:
    """The schema of ``prometheusRule.thresholds``, ``.selectors`` and ``.cost``."""
    out = {section: _object({s.key: _schema(s.kind, s.help)
                             for s in SETTINGS if s.section == section})
           for section in SECTIONS}
    price = {"type": ["number", "null"], "minimum": 0}
    out["cost"] = _object({
        "currency": {"type": "string", "pattern": f"^({CURRENCY_PATTERN.pattern})?$",
                     "description": "The prices' currency (EUR, USD, €); needed with a price."},
        "gpuHourPrices": {
            "type": "array",
            "items": _object({"model": {"type": "string", "pattern": _anchored(TEXT_PATTERN)},
                              "price": {"type": "number", "minimum": 0}},
                             required=["model", "price"]),
            "description": "Price per GPU-hour by gpu_info model name (regular expression; "
                           "first match wins)."},
        "defaultGpuHourPrice": {**price, "description": "Price per GPU-hour of other models; "
                                "null: only the models listed are priced."},
        "kwhPrice": {**price, "description": "Price per kWh of attributed energy; null: energy "
                     "is not priced."},
        "teams": _object({"users": _names(), "namespaces": _names()}),
    })
    return out


def render_schema(text: str) -> str:
    """values.schema.json with the settings' schema written into ``prometheusRule``."""
    schema = json.loads(text)
    rule = schema["properties"]["prometheusRule"]["properties"]
    rule.update(settings_schema())
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def settings_table() -> str:
    """docs/settings.md's table: every setting, its section, default and meaning."""
    rows = ["| key | default | takes | meaning |", "|---|---|---|---|"]
    for setting in SETTINGS:
        default = _yaml_value(setting.default)
        rows.append(f"| `{setting.section}.{setting.key}` | `{default}` | "
                    f"{setting.kind.value} | {setting.help} |")
    return "\n".join(rows)

"""What a site sets without a fork: the settings the rules and dashboards are built from.

As kubernetes-mixin's ``_config``: a small set of thresholds and durations, the scrape-job
selector of the exporter-down alert, and prices. Each settable value is one row of
``SETTINGS``: its key (the same in a settings file for ``python -m dashboards.generate
--config`` and under the Helm chart's ``prometheusRule`` values), the constant of
``exporter.catalogue.thresholds`` it overrides (the default lives there, once), what values it
takes, and what it means. A settings file holds only what differs::

    thresholds:
      memoryUsedRatio: 0.95
      idleFor: 4h
    selectors:
      exporterJob: "node-gpu"
    cost:
      currency: EUR
      gpuHourPrices:
        - {model: "NVIDIA H100.*", price: 2.5}
      defaultGpuHourPrice: 1.2
      kwhPrice: 0.3
      teams:
        users: {alice: vision}
        namespaces: {ml-prod: platform}

Not settable here, on purpose: the idle threshold and the idle process floor
(``IDLE_UTILIZATION_RATIO``, ``IDLE_PROCESS_MEMORY_BYTES``), which the exporter itself applies
when it sums idle memory and integrates its accounting counters (a rule-side value would
disagree with the exporter's); the windows that are part of record names; and the owner
escalation delay, which the Alertmanager configuration's timings follow.

``parse`` checks a parsed document (no I/O here) and raises ``SettingsError`` with one line
naming the key and what is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from exporter.catalogue import thresholds

__all__ = ["COST_SECTION", "CURRENCY_PATTERN", "DURATION_PATTERN", "NAME_PATTERN", "SECTIONS",
           "SETTINGS", "TEXT_PATTERN", "TOKEN_CLOSE", "TOKEN_OPEN", "GpuHourPrice", "Kind",
           "Prices", "Setting", "Settings", "SettingsError", "Teams", "check_value", "parse"]


class SettingsError(ValueError):
    """A settings document is unusable (one line: the key and what is wrong)."""


class Kind(Enum):
    """What values a setting takes (and how the Helm chart writes them in a rule)."""

    RATIO = "ratio"  # a share, 0 < x <= 1
    CELSIUS = "celsius"  # a temperature, 0 < x < 150
    BYTES = "bytes"  # a whole number of bytes, >= 0
    SECONDS = "seconds"  # a number of seconds, > 0
    COUNT = "count"  # a number of events, >= 0
    DURATION = "duration"  # a Prometheus duration of one unit: 30s, 5m, 1h, 2d, 1w
    REGEX = "regex"  # a regular expression matched against a label (fully anchored)

    @property
    def numeric(self) -> bool:
        """Whether its values are numbers."""
        return self not in (Kind.DURATION, Kind.REGEX)


@dataclass(frozen=True, slots=True)
class Setting:
    """One settable value: ``key`` under ``section``, overriding ``constant`` of
    ``exporter.catalogue.thresholds`` (its default)."""

    section: str  # "thresholds" or "selectors"
    key: str  # camelCase, as in Helm values
    constant: str
    kind: Kind
    help: str

    @property
    def default(self) -> float | str:
        """The value ``thresholds`` declares."""
        value: float | str = getattr(thresholds, self.constant)
        return value


def _threshold(key: str, constant: str, kind: Kind, help_text: str) -> Setting:
    return Setting("thresholds", key, constant, kind, help_text)


SETTINGS: tuple[Setting, ...] = (
    _threshold("memoryUsedRatio", "MEMORY_USED_RATIO", Kind.RATIO,
               "Share of a GPU's memory in use above which GpuMemoryAlmostFull fires."),
    _threshold("memoryUsedFor", "MEMORY_USED_FOR", Kind.DURATION,
               "How long memory must stay above memoryUsedRatio."),
    _threshold("leakFor", "LEAK_FOR", Kind.DURATION,
               "How long the exhaustion forecast must hold before GpuMemoryExhaustionForecast."),
    _threshold("idleGpuMemoryRatio", "IDLE_GPU_MEMORY_RATIO", Kind.RATIO,
               "Share of a GPU's memory in use from which an idle GPU counts as held "
               "(GpuMemoryHeldIdle)."),
    _threshold("idleUserMemoryBytes", "IDLE_USER_MEMORY_BYTES", Kind.BYTES,
               "Idle memory a user must hold on a host for GpuUserMemoryIdle."),
    _threshold("idleFor", "IDLE_FOR", Kind.DURATION,
               "How long memory must be held idle before the idle alerts fire."),
    _threshold("starvedUtilizationRatio", "STARVED_UTILIZATION_RATIO", Kind.RATIO,
               "Average activity under which a GPU in use counts as starved (GpuStarved)."),
    _threshold("starvedPowerRatio", "STARVED_POWER_RATIO", Kind.RATIO,
               "Share of the power limit under which a GPU in use counts as starved."),
    _threshold("starvedFor", "STARVED_FOR", Kind.DURATION, "How long before GpuStarved fires."),
    _threshold("temperatureWarningCelsius", "TEMPERATURE_WARNING_CELSIUS", Kind.CELSIUS,
               "Temperature above which GpuTemperatureHigh fires."),
    _threshold("temperatureWarningFor", "TEMPERATURE_WARNING_FOR", Kind.DURATION,
               "How long above temperatureWarningCelsius."),
    _threshold("temperatureCriticalCelsius", "TEMPERATURE_CRITICAL_CELSIUS", Kind.CELSIUS,
               "Temperature above which GpuTemperatureCritical fires."),
    _threshold("temperatureCriticalFor", "TEMPERATURE_CRITICAL_FOR", Kind.DURATION,
               "How long above temperatureCriticalCelsius."),
    _threshold("throttleFor", "THROTTLE_FOR", Kind.DURATION,
               "How long a thermal slowdown lasts before its alerts fire."),
    _threshold("powerCapFor", "POWER_CAP_FOR", Kind.DURATION,
               "How long a GPU sits at its power cap before GpuPowerCapped."),
    _threshold("gpuDownFor", "GPU_DOWN_FOR", Kind.DURATION,
               "How long a GPU does not answer before GpuDown."),
    _threshold("gpuMissingFor", "GPU_MISSING_FOR", Kind.DURATION,
               "How long a GPU seen before is gone before GpuMissing."),
    _threshold("exporterDownFor", "EXPORTER_DOWN_FOR", Kind.DURATION,
               "How long a target is down before GpuExporterDown."),
    _threshold("sourceDownFor", "SOURCE_DOWN_FOR", Kind.DURATION,
               "How long NVML is down before GpuExporterSourceDown."),
    _threshold("collectionFailingFor", "COLLECTION_FAILING_FOR", Kind.DURATION,
               "How long collections fail before GpuExporterCollectionFailing."),
    _threshold("dataStaleSeconds", "DATA_STALE_SECONDS", Kind.SECONDS,
               "Age of the served data above which it is stale (GpuExporterDataStale)."),
    _threshold("dataStaleFor", "DATA_STALE_FOR", Kind.DURATION,
               "How long the data stays stale before GpuExporterDataStale."),
    _threshold("errorsThreshold", "ERRORS_THRESHOLD", Kind.COUNT,
               "Errors of one kind per 15 minutes above which GpuExporterErrors fires."),
    _threshold("podResourcesFailingFor", "POD_RESOURCES_FAILING_FOR", Kind.DURATION,
               "How long the kubelet's PodResources API fails before its alert."),
    _threshold("torchRetriesThreshold", "TORCH_RETRIES_THRESHOLD", Kind.COUNT,
               "PyTorch allocation retries per 15 minutes above which "
               "GpuProcessTorchAllocRetries fires."),
    _threshold("torchRetriesFor", "TORCH_RETRIES_FOR", Kind.DURATION,
               "How long the retries continue before GpuProcessTorchAllocRetries."),
    Setting("selectors", "exporterJob", "EXPORTER_JOB_REGEX", Kind.REGEX,
            "The scrape jobs of the exporter (a regular expression on job) that "
            "GpuExporterDown watches."),
)
#: The sections of a settings document: settings by section, then ``cost``.
SECTIONS: tuple[str, ...] = ("thresholds", "selectors")
COST_SECTION = "cost"
DURATION_PATTERN = re.compile(r"[0-9]{1,6}(s|m|h|d|w)")
#: What a regular expression (or a GPU model pattern) may hold: printable ASCII without quotes
#: or backslashes, so that it stands in a PromQL string, a YAML scalar and a Helm value as is.
TEXT_PATTERN = re.compile(r"[ !#-\[\]-~]{1,200}")
#: A currency as the dashboards and the report print it (EUR, USD, €, CHF).
CURRENCY_PATTERN = re.compile(r"[^\x00-\x20\"'\\{}<>&;:⟦⟧]{1,8}")
#: User, namespace and team names as labels carry them (no quotes, no control characters).
NAME_PATTERN = re.compile(r"[^\x00-\x1f\"\\⟦⟧]{1,128}")
#: The Helm chart's placeholders start with this (``⟦key⟧``): no value may hold it.
TOKEN_OPEN, TOKEN_CLOSE = "⟦", "⟧"


@dataclass(frozen=True, slots=True)
class GpuHourPrice:
    """The price of one GPU-hour of the models whose ``gpu_info`` name matches ``model`` (a
    regular expression, fully anchored: an exact model name matches itself)."""

    model: str
    price: float


@dataclass(frozen=True, slots=True)
class Teams:
    """Who belongs to which team (or account): by user, and by Kubernetes namespace (a pod's
    namespace decides before its processes' user)."""

    users: Mapping[str, str] = field(default_factory=dict)
    namespaces: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.users or self.namespaces)

    def of(self, *, user: str = "", namespace: str = "", account: str = "") -> str | None:
        """The team of an owner: a Slurm job's ``account`` where known, else its namespace's
        team, else its user's; None when none applies."""
        if account:
            return account
        return self.namespaces.get(namespace) or self.users.get(user)


@dataclass(frozen=True, slots=True)
class Prices:
    """What GPU time and energy cost, in ``currency``: per GPU-hour by model (first match
    wins, ``default_gpu_hour`` for other models, None: those are not priced), per kWh."""

    currency: str
    gpu_hour: tuple[GpuHourPrice, ...] = ()
    default_gpu_hour: float | None = None
    kwh: float | None = None

    @property
    def gpu_priced(self) -> bool:
        """Whether GPU time has a price."""
        return bool(self.gpu_hour) or self.default_gpu_hour is not None

    def gpu_hour_price(self, model: str) -> float | None:
        """The price of one GPU-hour of ``model`` (as ``gpu_info`` names it), or None."""
        for entry in self.gpu_hour:
            if re.fullmatch(entry.model, model):
                return entry.price
        return self.default_gpu_hour


@dataclass(frozen=True, slots=True)
class Settings:
    """A parsed settings document: ``values`` maps a constant of ``thresholds`` to its value
    (only those set), ``prices`` is None without any price, ``teams`` may be empty."""

    values: Mapping[str, float | str] = field(default_factory=dict)
    prices: Prices | None = None
    teams: Teams = field(default_factory=Teams)

    def value(self, setting: Setting) -> float | str:
        """The value in force: the one set, else the default."""
        return self.values.get(setting.constant, setting.default)


def _fail(where: str, problem: str) -> SettingsError:
    return SettingsError(f"{where}: {problem}")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(where, "must be a mapping of names to values")
    return value


def _unknown(doc: Mapping[str, Any], known: set[str] | tuple[str, ...], where: str) -> None:
    extra = sorted(set(doc) - set(known))
    if extra:
        raise _fail(f"{where}.{extra[0]}" if where else extra[0],
                    f"unknown key (known: {', '.join(sorted(known))})")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(where, f"{value!r} is not a number")
    return float(value)


def check_value(setting: Setting, value: Any, where: str) -> float | str:
    """``value`` as ``setting`` takes it.

    Raises:
        SettingsError: of the wrong type or out of range.
    """
    kind = setting.kind
    if kind is Kind.DURATION:
        if not isinstance(value, str) or not DURATION_PATTERN.fullmatch(value):
            raise _fail(where, f"{value!r} is not a duration of one unit like 30s, 5m, 1h, 2d")
        return value
    if kind is Kind.REGEX:
        if not isinstance(value, str) or not TEXT_PATTERN.fullmatch(value):
            raise _fail(where, f"{value!r} must be printable ASCII without quotes or "
                        "backslashes")
        try:
            re.compile(value)
        except re.error as exc:
            raise _fail(where, f"{value!r} is not a regular expression ({exc})") from None
        return value
    number = _number(value, where)
    limits = {Kind.RATIO: (0.0, 1.0, False), Kind.CELSIUS: (0.0, 150.0, False),
              Kind.BYTES: (0.0, 2.0**53, True), Kind.SECONDS: (0.0, 1e9, False),
              Kind.COUNT: (0.0, 1e9, True)}
    low, high, low_included = limits[kind]
    if not (low <= number if low_included else low < number) or number > high:
        bracket = "[" if low_included else "("
        raise _fail(where, f"{value!r} is out of range {bracket}{low:g}, {high:g}]")
    if kind in (Kind.BYTES, Kind.COUNT) and not number.is_integer():
        raise _fail(where, f"{value!r} is not a whole number")
    return number


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise _fail(where, f"{value!r} is not a name (1-128 characters, no quotes or "
                    "control characters)")
    return value


def _price(value: Any, where: str) -> float:
    number = _number(value, where)
    if number < 0:
        raise _fail(where, f"{value!r} is negative")
    return number


def _prices(cost: dict[str, Any]) -> Prices | None:
    where = COST_SECTION
    rows = cost.get("gpuHourPrices") or []
    if not isinstance(rows, list):
        raise _fail(f"{where}.gpuHourPrices", "must be a list of {model, price}")
    gpu_hour = []
    for i, row in enumerate(rows):
        at = f"{where}.gpuHourPrices[{i}]"
        entry = _mapping(row, at)
        _unknown(entry, ("model", "price"), at)
        model = entry.get("model")
        if not isinstance(model, str) or not TEXT_PATTERN.fullmatch(model):
            raise _fail(f"{at}.model", f"{model!r} must be a model name or regular expression "
                        "(printable ASCII without quotes or backslashes)")
        try:
            re.compile(model)
        except re.error as exc:
            raise _fail(f"{at}.model", f"{model!r} is not a regular expression ({exc})"
                        ) from None
        gpu_hour.append(GpuHourPrice(model, _price(entry.get("price"), f"{at}.price")))
    default = cost.get("defaultGpuHourPrice")
    kwh = cost.get("kwhPrice")
    prices = Prices(
        currency="",
        gpu_hour=tuple(gpu_hour),
        default_gpu_hour=None if default is None else _price(default,
                                                              f"{where}.defaultGpuHourPrice"),
        kwh=None if kwh is None else _price(kwh, f"{where}.kwhPrice"),
    )
    currency = cost.get("currency") or ""
    if not prices.gpu_priced and prices.kwh is None:
        return None
    if not isinstance(currency, str) or not CURRENCY_PATTERN.fullmatch(currency):
        raise _fail(f"{where}.currency", f"{currency!r}: prices need a currency of 1-8 "
                    "characters (EUR, USD, €)")
    return Prices(currency, prices.gpu_hour, prices.default_gpu_hour, prices.kwh)


def _teams(value: Any) -> Teams:
    where = f"{COST_SECTION}.teams"
    doc = _mapping(value, where)
    _unknown(doc, ("users", "namespaces"), where)
    parts = []
    for part in ("users", "namespaces"):
        mapping = _mapping(doc.get(part), f"{where}.{part}")
        parts.append({_name(k, f"{where}.{part}"): _name(v, f"{where}.{part}.{k}")
                      for k, v in mapping.items()})
    return Teams(parts[0], parts[1])


def parse(doc: Any) -> Settings:
    """A settings document (parsed YAML or Helm values) as ``Settings``; empty or None: the
    defaults.

    Raises:
        SettingsError: an unknown key, a value of the wrong type or out of range, or prices
            without a currency.
    """
    top = _mapping(doc, "the settings")
    _unknown(top, (*SECTIONS, COST_SECTION), "")
    values: dict[str, float | str] = {}
    for section in SECTIONS:
        given = _mapping(top.get(section), section)
        rows = {s.key: s for s in SETTINGS if s.section == section}
        _unknown(given, tuple(rows), section)
        for key, value in given.items():
            setting = rows[key]
            values[setting.constant] = check_value(setting, value, f"{section}.{key}")
    cost = _mapping(top.get(COST_SECTION), COST_SECTION)
    _unknown(cost, ("currency", "gpuHourPrices", "defaultGpuHourPrice", "kwhPrice", "teams"),
             COST_SECTION)
    return Settings(values, _prices(cost), _teams(cost.get("teams")))

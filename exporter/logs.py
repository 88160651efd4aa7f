"""Logging setup for ``--log.level`` and ``--log.format logfmt|json``.

One handler on the root logger writing to stderr; uvicorn's loggers propagate to it (the CLI
starts uvicorn with ``log_config=None``), so every line has the same format.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

from exporter.logthrottle import RepeatFilter

#: ``--log.level`` values -> logging levels ("warn" as in Prometheus exporters).
LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

# Attributes every LogRecord has; anything else was passed through ``extra=`` and is logged.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    out: dict[str, object] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower().replace("warning", "warn"),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in record.__dict__.items():
        if key not in _STANDARD and not key.startswith("_"):
            out[key] = value
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and not any(c in text for c in ' ="\\\n\t'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=info logger=exporter msg="..." key=value`` lines (UTC timestamps)."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the same keys as logfmt."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str, ensure_ascii=False)


def setup_logging(level: str = "info", fmt: str = "logfmt", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one stderr handler in the chosen format.

    Raises:
        ValueError: unknown level or format (config.py validates both first).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}")
    if fmt not in ("logfmt", "json"):
        raise ValueError(f"unknown log format {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    # uvicorn's own loggers: let them propagate to ours, at our level.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(LEVELS[level])

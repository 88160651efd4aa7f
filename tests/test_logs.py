"""Logging setup: logfmt quoting, JSON lines, levels, uvicorn's loggers."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from exporter.logs import setup_logging


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    yield out
    root.handlers[:] = handlers
    root.setLevel(level)


def test_logfmt_quotes_and_escapes(stream: io.StringIO) -> None:
    setup_logging("info", "logfmt", stream)
    logging.getLogger("exporter.test").warning('say "hi"\nnow', extra={"gpu": 3, "path": "/x y"})
    line = stream.getvalue().strip()
    assert "\n" not in line
    assert " level=warn " in line
    assert "logger=exporter.test" in line
    assert 'msg="say \\"hi\\"\\nnow"' in line
    assert "gpu=3" in line
    assert 'path="/x y"' in line
    assert line.startswith("ts=")
    assert line.split(" ")[0].endswith("Z")


def test_json_lines_and_level_filter(stream: io.StringIO) -> None:
    setup_logging("warn", "json", stream)
    logging.getLogger("exporter").info("hidden")
    logging.getLogger("uvicorn.error").error("boom", extra={"source": "nvml"})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["level"] == "error"
    assert record["logger"] == "uvicorn.error"  # uvicorn propagates into our handler
    assert record["msg"] == "boom"
    assert record["source"] == "nvml"


def test_exceptions_are_one_line(stream: io.StringIO) -> None:
    setup_logging("debug", "logfmt", stream)
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("exporter").exception("failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert "ValueError: bad" in lines[0]


def test_unknown_level_or_format_raise() -> None:
    with pytest.raises(ValueError, match="level"):
        setup_logging("loud", "logfmt")
    with pytest.raises(ValueError, match="format"):
        setup_logging("info", "xml")

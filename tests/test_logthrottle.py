"""Repeated log lines are rate limited, and the next one passed says how many were dropped."""

from __future__ import annotations

import io
import logging

from exporter.logthrottle import RepeatFilter


def test_repeats_dropped_and_counted() -> None:
    now = [0.0]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RepeatFilter(burst=3, window=10.0, clock=lambda: now[0]))
    handler.setFormatter(logging.Formatter("%(message)s %(suppressed)s", defaults={
        "suppressed": 0}))
    logger = logging.getLogger("test.logthrottle")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for i in range(1000):
            logger.warning("too many open files (%d)", i)
        logger.warning("another kind")
        assert stream.getvalue().count("too many open files") == 3
        assert "another kind" in stream.getvalue()
        now[0] = 11.0
        logger.warning("too many open files (%d)", 1000)
        assert stream.getvalue().splitlines()[-1] == "too many open files (1000) 997"
    finally:
        logger.removeHandler(handler)

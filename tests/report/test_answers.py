"""Odd answers from Prometheus: a malformed one is exit 2 with one line, never a traceback;
NaN, infinite, negative or absurd values are left out with a note, and every format stays
strict (JSON without NaN, no 'nan' or 300-digit numbers in text or CSV)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.catalogue import records
from exporter.report.main import main
from tests.report.canned import canned, serve

GOOD_RULES = {"groups": [{"name": records.GROUP, "interval": 60}]}


@pytest.fixture
def prometheus() -> Iterator[tuple[str, dict[str, Any]]]:
    answers: dict[str, Any] = {}
    with serve(canned(answers)) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answers


def _run(url: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--prometheus.url", url, "--since", "1d", "--no-progress", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _vector(*samples: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1700000000, value]} for labels, value in samples]}}


@pytest.mark.parametrize(("rules", "query", "message"), [
    ({"status": "success", "data": None}, None, "to /api/v1/rules: no data"),
    ({"status": "success", "data": {"groups": [{"name": records.GROUP, "interval": {"x": 1}}]}},
     None, "has interval {'x': 1}, not a number of seconds"),
    ({"status": "success", "data": {"groups": "none"}}, None, "no list of groups"),
    ({"status": "error", "error": "bad\nthings " * 40}, None,
     "Prometheus answered an error for /api/v1/rules: bad things bad things"),
    (None, {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"value": [1, "1"]}]}},
     "a sample without its metric labels"),
    (None, {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": {}, "value": [1, "many"]}]}},
     "a sample value 'many' that is not a number"),
    (None, {"status": "success", "data": {"resultType": "matrix", "result": []}},
     "a matrix result, not a vector"),
    (None, {"status": "success", "data": None}, "no data"),
    (None, [1, 2], "a JSON list, not an object"),
])
def test_a_malformed_answer_is_exit_2_with_one_short_line(
        prometheus: tuple[str, dict[str, Any]], capsys: pytest.CaptureFixture[str],
        rules: Any, query: Any, message: str) -> None:
    url, answers = prometheus
    answers["/api/v1/rules"] = rules if rules is not None else {
        "status": "success", "data": GOOD_RULES}
    if query is not None:
        answers["/api/v1/query"] = query
    code, out, err = _run(url, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert message in lines[0]
    assert len(lines[0]) < 300  # a six-line query is not pasted in
    assert out == ""


def test_nan_infinite_negative_and_absurd_values_are_left_out_with_a_note(
        prometheus: tuple[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    url, answers = prometheus
    answers["/api/v1/rules"] = {"status": "success", "data": GOOD_RULES}
    tag = "__report_field"
    answers["/api/v1/query"] = _vector(
        ({tag: records.IDLE_GPUS, "user": "alice"}, "1"),  # one GPU idle: 60 GPU-s a sample
        ({tag: records.HELD_GPUS, "user": "alice"}, "NaN"),
        ({tag: records.HELD_MEMORY, "user": "alice"}, "+Inf"),
        ({tag: records.IDLE_MEMORY, "user": "alice"}, "-Inf"),
        ({tag: records.USED_GPUS, "user": "alice"}, "-5"),
        ({tag: records.POWER, "user": "alice"}, "1e300"),
    )
    for form in ("json", "text", "csv", "markdown"):
        code, out, err = _run(url, capsys, "--format", form)
        assert code == 0, err
        assert "note: " in out, form
        lowered = "\n".join(line for line in out.lower().splitlines() if "note: " not in line)
        for bad in ("nan", "inf ", "infinity", "e+300", "-5"):
            assert bad not in lowered, (form, bad)
        if form == "json":
            doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"bare {name}"))
            assert doc["notes"][0].startswith("note: ")
            assert doc["totals"]["idle_gpu_seconds"] > 0  # the good value is counted
            assert doc["totals"]["held_gpu_seconds"] == 0
            assert doc["totals"]["energy_joules"] is None
        if form == "csv":
            rows = list(csv.DictReader(io.StringIO(out)))
            assert next(r["note"] for r in rows if r["section"] == "note").startswith("note: ")

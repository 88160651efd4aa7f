"""Bounded YAML: alias bombs, deep nesting, huge texts and node floods fail fast with a line."""

from __future__ import annotations

import time

import pytest

from exporter.boundedyaml import YamlLimitError, load_bounded

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(9))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BOMB, "aliases"),
        ("a: " + "[" * 10_000 + "]" * 10_000, "nest"),  # libyaml's own bound or ours
        ("{a: " * 40 + "1" + "}" * 40, "nested deeper than 32"),
        ("- {" * 40 + "}" * 40, "line 1"),  # 10 s in PyYAML's pure-Python scanner
        ("[" + "0," * 300_000 + "0]", "more than 200000 YAML nodes"),
        ("0" * (2 << 20), "larger than"),
        ("a: [\n", "line"),
        ("a: 1\n---\nb: 2\n", "line"),
    ],
)
def test_refused_quickly(text: str, message: str) -> None:
    started = time.perf_counter()
    with pytest.raises(YamlLimitError) as info:
        load_bounded(text)
    assert time.perf_counter() - started < 2
    assert message in str(info.value)


def test_node_bound() -> None:
    with pytest.raises(YamlLimitError, match="more than 100 YAML nodes"):
        load_bounded("[" + ",".join("1" * 200) + "]", max_nodes=100)


def test_plain_documents_load() -> None:
    assert load_bounded("a: [1, 2.5, .inf]\nb: {c: d}\n") == {
        "a": [1, 2.5, float("inf")], "b": {"c": "d"}}
    assert load_bounded("") is None

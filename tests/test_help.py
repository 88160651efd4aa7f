"""``gpu-exporter --help``: the subcommands first, then the flags grouped by concern (as
node_exporter and argparse's argument groups do), every flag in a named section."""

from __future__ import annotations

import re

import pytest

from exporter.cli import main
from exporter.config import COMMANDS, FLAG_SECTIONS, FLAGS, OTHER_SECTION, flag_section


def _help(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    try:
        code = main([*args, "--help"])
    except SystemExit as done:  # a command's own parser exits
        code = done.code
    assert code == 0
    return capsys.readouterr().out


def _sections(text: str) -> dict[str, str]:
    """Section title -> its text (a section starts at a line ending in ':' at column 0)."""
    parts = re.split(r"^(\S[^\n]*):\n", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_flag_has_a_named_section() -> None:
    assert [flag.name for flag in FLAGS if flag_section(flag) == OTHER_SECTION] == []
    used = {flag_section(flag) for flag in FLAGS}
    assert used == {title for title, _ in FLAG_SECTIONS}, "a section without flags"


def test_help_lists_the_commands_first_then_the_flags_by_section(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    lines = text.splitlines()
    assert lines[0] == "usage: gpu-exporter [FLAGS]"
    assert lines[1].strip() == "gpu-exporter COMMAND [COMMAND FLAGS]"
    sections = _sections(text)
    titles = list(sections)
    assert titles[0] == "commands"
    for name, _ in COMMANDS:
        assert re.search(rf"^  {name}\s", sections["commands"], re.MULTILINE), name
    assert [t for t in titles if t in dict(FLAG_SECTIONS)] == [t for t, _ in FLAG_SECTIONS]
    for flag in FLAGS:
        option = f"--{flag.name}, --no-{flag.name}" if flag.is_bool else f"--{flag.name}"
        where = [title for title, body in sections.items()
                 if re.search(rf"^  {re.escape(option)}\b", body, re.MULTILINE)]
        assert where == [flag_section(flag)], (flag.name, where)
    assert max(len(line) for line in lines) <= 80


def test_each_command_answers_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name, _ in COMMANDS:
        text = _help(capsys, name)
        assert text.startswith(f"usage: gpu-exporter {name}")

"""A small Dockerfile reader: stages, instructions (continuations joined), RUN mounts."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # the rest of the line, continuations joined with spaces


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages of a Dockerfile.

    Raises:
        ValueError: an instruction before the first FROM other than ARG.
    """
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for text in logical:
        keyword, _, rest = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=base, name=name))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"{keyword} before the first FROM")
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        else:
            stages[-1].instructions.append(Instruction(keyword, rest.strip()))
    return args, stages


@dataclass(frozen=True)
class RunCommand:
    """A RUN instruction split into its BuildKit ``--mount`` options and the shell command."""

    mounts: tuple[dict[str, str], ...]
    command: str


def split_run(instruction: Instruction) -> RunCommand:
    mounts: list[dict[str, str]] = []
    rest = instruction.args
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        name, _, value = option[2:].partition("=")
        if name == "mount":
            mounts.append(dict(part.split("=", 1) for part in value.split(",")))
    return RunCommand(mounts=tuple(mounts), command=rest)


def exec_form(args: str) -> list[str]:
    """The JSON array of an exec-form CMD/ENTRYPOINT, or the shell words of a shell form."""
    text = args.strip()
    if text.startswith("["):
        value = json.loads(text)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return shlex.split(text)

"""YAML for files named on the command line, parsed within fixed bounds.

``yaml.safe_load`` builds anything the text describes: an alias bomb (a few hundred bytes of
nested ``&a [*b, *b, ...]``) yields a structure whose traversal takes minutes and gigabytes,
and a deeply nested document exhausts the recursion limit with a traceback. Configuration
never needs either, so this loader refuses aliases outright and bounds the size of the text,
the nesting depth and the number of nodes on the parse events, before any Python object is
built.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["YamlLimitError", "load_bounded"]

#: Defaults sized for configuration files: ~100x the largest shipped file, far below harm.
MAX_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 200_000


class YamlLimitError(ValueError):
    """The text is not YAML, or exceeds a bound (the message says which, with a line number)."""


#: libyaml's parser when PyYAML has it (it ships in the wheels): the pure-Python scanner takes
#: exponential time on some short texts ("- {" * 40: 10 s), libyaml does not.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}" if mark is not None else "?"


def _check_events(text: str, max_depth: int, max_nodes: int) -> None:
    """Walk the parse events (no objects built) and enforce the bounds."""
    loader = _LOADER(text)
    depth = nodes = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent):
                raise YamlLimitError(f"{_where(event.start_mark)}: YAML aliases "
                                     f"(*{event.anchor}) are not accepted here")
            if isinstance(event, (yaml.ScalarEvent, *_OPEN)):
                nodes += 1
                if nodes > max_nodes:
                    raise YamlLimitError(f"{_where(event.start_mark)}: more than {max_nodes} "
                                         "YAML nodes")
            if isinstance(event, _OPEN):
                depth += 1
                if depth > max_depth:
                    raise YamlLimitError(f"{_where(event.start_mark)}: nested deeper than "
                                         f"{max_depth} levels")
            elif isinstance(event, _CLOSE):
                depth -= 1
    finally:
        loader.dispose()


def load_bounded(
    text: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
) -> Any:
    """Parse one YAML document from ``text`` within the bounds.

    Raises:
        YamlLimitError: syntax error, an alias, more than one document, or a bound exceeded.
    """
    if len(text) > max_bytes:
        raise YamlLimitError(f"larger than {max_bytes} bytes")
    try:
        _check_events(text, max_depth, max_nodes)
        return yaml.load(text, Loader=_LOADER)
    except YamlLimitError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlLimitError(f"{_where(mark)}: {problem}") from None
    except RecursionError:  # constructing a deep document on a tiny stack
        raise YamlLimitError("nested too deeply") from None

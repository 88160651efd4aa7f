"""The slot-storing ``__init__`` of the snapshot's hot dataclasses: same behaviour as the
generated one."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field

import pytest

from exporter.frozeninit import slot_init
from exporter.snapshot import GpuProcess, GpuReading, Snapshot


@dataclass(frozen=True, slots=True)
class Plain:
    first: int
    second: str = "two"
    third: list[int] = field(default_factory=list)


Stored = slot_init(dataclass(frozen=True, slots=True)(type(
    "Stored", (), {"__annotations__": {"first": "int", "second": "str", "third": "list[int]"},
                   "second": "two", "third": field(default_factory=list)})))


def test_same_values_defaults_and_fresh_factories() -> None:
    assert repr(Stored(1)) == repr(Plain(1)).replace("Plain", "Stored")
    assert repr(Stored(1, third=[3], second="x")) == "Stored(first=1, second='x', third=[3])"
    assert Stored(1).third is not Stored(1).third  # type: ignore[attr-defined]
    assert Stored(1) == Stored(1)
    assert str(inspect.signature(Stored)) == str(inspect.signature(Plain))
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        Stored()
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        Stored(1, fourth=4)


def test_still_frozen() -> None:
    stored = Stored(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.first = 2  # type: ignore[attr-defined]
    assert dataclasses.replace(stored, first=2).first == 2  # type: ignore[type-var]


def test_refuses_what_it_does_not_reproduce() -> None:
    @dataclass(slots=True)
    class Mutable:
        first: int

    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        first: int = field(kw_only=True)

    @dataclass(frozen=True)
    class NoSlots:
        first: int

    for cls in (Mutable, KeywordOnly, NoSlots):
        with pytest.raises(TypeError):
            slot_init(cls)


def test_snapshot_classes_use_it() -> None:
    for cls in (GpuProcess, GpuReading, Snapshot):
        assert any(name.startswith("_store_") for name in cls.__init__.__code__.co_names)

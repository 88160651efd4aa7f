"""The reader's compiled plain reads (``compile_plain_reads``), row by row, without a source."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from exporter.catalogue.metrics import Value
from exporter.sources.nvml.device import GpuState, placeholder_identity
from exporter.sources.nvml.plain_reads import PlainRead, compile_plain_reads


class _Answers:
    """A reader for ``compile_plain_reads``: what ``failed`` and ``call_newest`` were asked."""

    def __init__(self) -> None:
        self.failed_calls: list[tuple[str, str]] = []
        self.newest_calls: list[tuple[tuple[str, ...], tuple[int, ...]]] = []

    def failed(self, gpu: GpuState, name: str, exc: Exception) -> None:
        self.failed_calls.append((name, str(exc)))

    def call_newest(self, gpu: GpuState, names: tuple[str, ...], *args: int) -> object:
        self.newest_calls.append((names, args))
        return 7


def test_compiled_plain_reads_follow_each_row() -> None:
    calls: list[tuple[str, tuple[int, ...]]] = []

    def rates(handle: object) -> SimpleNamespace:
        calls.append(("rates", ()))
        return SimpleNamespace(gpu=55, memory=20)

    def clock(handle: object, kind: int) -> int:
        calls.append(("clock", (kind,)))
        return {0: 1980, 1: 300}[kind]

    def pstate(handle: object) -> int:
        calls.append(("pstate", ()))
        return 32  # NVML's "unknown" performance state

    def broken(handle: object) -> int:
        raise RuntimeError("odd answer")

    def never(handle: object) -> int:
        raise AssertionError("an unsupported function was called")

    reads = (
        PlainRead("util", None, ("rates",), rates, (), "gpu", None, 1.0, 100.0),
        PlainRead("clock", "sm", ("clock",), clock, (0,), None, None, 1e6, 1.0),
        PlainRead("mem_util", None, ("rates",), rates, (), "memory", None, 1.0, 100.0),
        PlainRead("clock", "mem", ("clock",), clock, (1,), None, (0, 1000), 1e6, 1.0),
        PlainRead("pstate", None, ("pstate",), pstate, (), None, (0, 15), 1.0, 1.0),
        PlainRead("temp", None, ("temp_v", "temp"), None, (3,), None, None, 1.0, 1.0),
        PlainRead("power", None, ("power",), broken, (), None, None, 1.0, 1.0),
        PlainRead("fan", None, ("fan",), never, (), None, None, 1.0, 1.0),
    )
    read_plain = compile_plain_reads(reads)
    state = GpuState(index=0, identity=placeholder_identity(0), handle="h",
                     unsupported={"fan"})
    answers = _Answers()
    values: dict[str, Value] = {}
    read_plain(answers, state, values)  # type: ignore[arg-type]
    # pstate 32 is outside its range, power failed, fan is unsupported: no value for them.
    assert values == {"util": 0.55, "clock": {"sm": 1980e6, "mem": 300e6}, "mem_util": 0.2,
                      "temp": 7}
    assert list(values) == ["util", "clock", "mem_util", "temp"]  # row order
    assert type(values["temp"]) is int  # unscaled values stay as NVML gave them
    assert calls == [("rates", ()), ("clock", (0,)), ("clock", (1,)), ("pstate", ())]
    assert answers.newest_calls == [(("temp_v", "temp"), (3,))]
    assert answers.failed_calls == [("power", "odd answer")]
    assert "def read_plain" in (read_plain.__doc__ or "")


def test_compiled_plain_reads_refuse_what_is_not_a_name_or_number() -> None:
    with pytest.raises(ValueError, match="not a name"):
        compile_plain_reads((PlainRead("x", None, ("f",), None, (), "a.b", None, 1.0, 1.0),))
    with pytest.raises(ValueError, match="must be numbers"):
        compile_plain_reads((PlainRead("x", None, ("f",), None, ("0",), None, None, 1.0, 1.0),))  # type: ignore[arg-type]


def test_the_identity_carries_the_minor_number_where_nvml_gives_it() -> None:
    from exporter.sources.nvml.reader import read_identity  # noqa: PLC0415
    from tests.sources.fake_nvml import FakeNvml, h200  # noqa: PLC0415

    fake = FakeNvml([h200(0, minor=0), h200(1, minor=5), h200(2)])
    fake.nvmlInit()
    minors = [read_identity(fake, i, fake.nvmlDeviceGetHandleByIndex(i)).minor_number
              for i in range(3)]
    assert minors == [0, 5, None]

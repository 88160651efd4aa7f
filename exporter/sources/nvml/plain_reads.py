"""The plain rows of a set of groups (``NvmlRead``), compiled into one straight-line function.

What a plain read does (which function, which arguments, which attribute of the result, the
valid range, the scale) is fixed once the groups are, so ``compile_plain_reads`` writes the
reads of a GPU out as Python once per set of groups instead of deciding them per value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from exporter.catalogue.metrics import Value
from exporter.sources.nvml.device import FieldCalls, GpuState


class PlainRead(NamedTuple):
    """One value of a plain row (``NvmlRead``, arguments resolved): the call, and how its
    result becomes the value."""

    row: str
    label: str | None  # None: the row's one value
    functions: tuple[str, ...]  # newest first
    function: Callable[..., Any] | None  # functions[0] from the binding (None: it lacks it)
    args: tuple[int, ...]
    attribute: str | None
    valid: tuple[float, float] | None
    scale: float
    divisor: float


#: ``values[row]`` (or ``values[row][label]``) of every plain read of one GPU.
PlainReads = Callable[[FieldCalls, GpuState, dict[str, Value]], None]


def compile_plain_reads(reads: tuple[PlainRead, ...]) -> PlainReads:
    """One straight-line function for ``reads``, as ``dataclasses`` writes ``__init__``.

    A loop over the reads ran ~14 lines of Python per value, most of them deciding what a read
    is (shared call? one function? attribute? range? scale?), which is fixed once the groups
    are. This is most of an idle GPU's collection besides NVML, so the decisions are taken
    here, once. Each (functions, args) is called once, at its first row, and its result kept
    for the rows after it; the values go in in row order. For example::

        if 'nvmlDeviceGetUtilizationRates' in unsupported:
            result_0 = None
        else:
            try:
                result_0 = function_0(handle)
            except Exception as exc:  # sorted out by ``failed``
                reader.failed(gpu, 'nvmlDeviceGetUtilizationRates', exc)
                result_0 = None
        if result_0 is not None:
            raw = result_0.gpu
            values['gpu_utilization_ratio'] = raw * 1.0 / 100.0
        ...

    A function the binding lacks, or one with older fallbacks, goes through
    ``reader.call_newest``.
    """
    namespace: dict[str, Any] = {}
    lines = ["def read_plain(reader, gpu, values):",
             "    handle, unsupported = gpu.handle, gpu.unsupported"]
    results: dict[tuple[tuple[str, ...], tuple[int, ...]], str] = {}
    for read in reads:
        if read.attribute is not None and not read.attribute.isidentifier():
            raise ValueError(f"{read.row}: attribute {read.attribute!r} is not a name")
        if not all(type(n) in (int, float) for n in (*read.args, read.scale, read.divisor,
                                                     *(read.valid or ()))):
            raise ValueError(f"{read.row}: arguments, scale and range must be numbers")
        key = (read.functions, read.args)
        result = results.get(key)
        if result is None:
            result = results[key] = f"result_{len(results)}"
            args = "".join(f", {a!r}" for a in read.args)
            name = read.functions[0]
            if len(read.functions) == 1 and read.function is not None:
                function = f"function_{len(namespace)}"
                namespace[function] = read.function
                lines += [f"    if {name!r} in unsupported:",
                          f"        {result} = None",
                          "    else:",
                          "        try:",
                          f"            {result} = {function}(handle{args})",
                          "        except Exception as exc:  # sorted out by ``failed``",
                          f"            reader.failed(gpu, {name!r}, exc)",
                          f"            {result} = None"]
            else:
                lines.append(f"    {result} = reader.call_newest(gpu, {read.functions!r}{args})")
        raw = result if read.attribute is None else f"{result}.{read.attribute}"
        target = (f"values[{read.row!r}]" if read.label is None
                  else f"values.setdefault({read.row!r}, {{}})[{read.label!r}]")
        unscaled = read.scale == 1.0 and read.divisor == 1.0  # ints stay ints
        value = "raw" if unscaled else f"raw * {read.scale!r} / {read.divisor!r}"
        lines += [f"    if {result} is not None:", f"        raw = {raw}"]
        if read.valid is None:
            lines.append(f"        {target} = {value}")
        else:  # NVML's "unknown" markers fall outside
            lines += [f"        if {read.valid[0]!r} <= raw <= {read.valid[1]!r}:",
                      f"            {target} = {value}"]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<exporter.sources.nvml.plain_reads>", "exec"), namespace)
    read_plain: PlainReads = namespace["read_plain"]
    read_plain.__doc__ = source  # what it runs, for whoever debugs it
    return read_plain

"""A job summary in Jobstats' stored form: ``JS1:`` + base64(gzip(JSON)) in the job's
AdminComment, readable by ``jobstats JOBID`` and by ``gpu-exporter report job`` after
Prometheus has dropped the data.

Jobstats' JSON, whose fields are kept as Jobstats writes and reads them::

    {"gpus": 2, "total_time": 3600,
     "nodes": {"node1": {"gpu_utilization": {"0": 98.6},     # percent, one decimal
                         "gpu_used_memory": {"0": 8.3e10},    # bytes, peak of the whole GPU
                         "gpu_total_memory": {"0": 8.5e10},
                         "cpus": 12, "total_time": 57620.8,   # from the cgroup exporter,
                         "total_memory": 1.3e11, "used_memory": 8.4e10}}}   # where present

GPUs are keyed by minor number (``/dev/nvidia<N>``) as Jobstats keys them, or by the NVML
index where the minor number is not known. gpu-exporter adds, without touching those, one key
per node, ``"gpu_exporter": {"<minor>": {<figure key>: value, "gpu": "...", "uuid": "...",
"model": "...", "minor_number": "..."}}`` (every figure of ``exporter.report.jobs.FIGURES``,
in base units) and one at the top, ``"gpu_exporter": {"format": 1, "kind", "name", "start",
"end", "user", "state"}``.

``JS1:None`` is a job without GPU data (Jobstats' marker), ``JS1:Short`` a job too short for
it. Some Slurm versions' ``sacctmgr`` (22.05, Debian 12's) stores values in lower case, which
ruins base64; ``JS1B32:`` + base32(gzip(JSON)) carries the same JSON in letters of one case
(read case-insensitively) for those: ``gpu-exporter report job`` reads both, ``jobstats``
only the first (docs/slurm.md).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from typing import Any

from exporter.catalogue import job_notes
from exporter.report.jobs import FIGURES, GpuSummary, JobSummary, finish

__all__ = ["B32_PREFIX", "PREFIX", "SummaryError", "decode", "encode", "encode_b32",
           "to_json"]

PREFIX = "JS1:"
B32_PREFIX = "JS1B32:"
NO_DATA = "None"
SHORT = "Short"
FORMAT = 1
#: Largest stored text read and JSON inflated from it (Jobstats' largest are ~5,000 bytes).
MAX_TEXT = 1 << 20
MAX_JSON = 16 << 20
_OURS = "gpu_exporter"
_FIGURE_KEYS = {figure.key for figure in FIGURES} | {job_notes.MEMORY_PEAK_SHARE_KEY}


class SummaryError(ValueError):
    """A stored summary that cannot be read; the message is one line."""


def _gpu_key(gpu: GpuSummary) -> str:
    return gpu.minor_number or gpu.gpu


def to_json(summary: JobSummary) -> dict[str, Any]:
    """Jobstats' JSON of ``summary``, with gpu-exporter's fields added."""
    nodes: dict[str, dict[str, Any]] = {}
    for gpu in summary.gpus:
        node = nodes.setdefault(gpu.node, {})
        key, figures = _gpu_key(gpu), gpu.figures
        if "utilization_ratio" in figures:
            node.setdefault("gpu_utilization", {})[key] = round(
                figures["utilization_ratio"] * 100, 1)
        if "memory_peak_bytes" in figures:
            node.setdefault("gpu_used_memory", {})[key] = int(figures["memory_peak_bytes"])
        if "memory_total_bytes" in figures:
            node.setdefault("gpu_total_memory", {})[key] = int(figures["memory_total_bytes"])
        node.setdefault(_OURS, {})[key] = {
            **{k: v for k, v in figures.items() if k in _FIGURE_KEYS},
            "gpu": gpu.gpu, "uuid": gpu.uuid, "model": gpu.model,
            "minor_number": gpu.minor_number}
    for node_name, cpu in summary.cpu.items():
        nodes.setdefault(node_name, {}).update(cpu)
    return {
        "gpus": summary.gpu_count,
        "nodes": nodes,
        "total_time": round(summary.end - summary.start),
        _OURS: {"format": FORMAT, "kind": summary.kind, "name": summary.name,
                "start": summary.start, "end": summary.end, "user": summary.user,
                "state": summary.state},
    }


def _packed(summary: JobSummary) -> bytes:
    text = json.dumps(to_json(summary), separators=(",", ":"), sort_keys=True)
    return gzip.compress(text.encode("ascii"), mtime=0)


def encode(summary: JobSummary) -> str:
    """``JS1:`` + base64(gzip(JSON)) (``JS1:None`` without GPU data)."""
    if not summary.gpus:
        return PREFIX + NO_DATA
    return PREFIX + base64.b64encode(_packed(summary)).decode("ascii")


def encode_b32(summary: JobSummary) -> str:
    """The same in letters of one case, for a ``sacctmgr`` that lowercases what it stores."""
    if not summary.gpus:
        return B32_PREFIX + NO_DATA
    return B32_PREFIX + base64.b32encode(_packed(summary)).decode("ascii")


def _inflate(packed: bytes) -> dict[str, Any]:
    inflater = zlib.decompressobj(wbits=31)  # gzip
    try:
        raw = inflater.decompress(packed, MAX_JSON)
    except zlib.error as exc:
        raise SummaryError(f"not gzip data ({exc})") from None
    if inflater.unconsumed_tail:
        raise SummaryError(f"inflates to more than {MAX_JSON} bytes")
    try:
        doc = json.loads(raw)
    except ValueError:
        raise SummaryError("not JSON inside") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), dict):
        raise SummaryError("no 'nodes' in the stored JSON")
    return doc


def decode(text: str, kind: str = "job", name: str = "") -> JobSummary | None:
    """The summary stored in an AdminComment; None for Jobstats' no-data markers.

    Raises:
        SummaryError: neither form, or a damaged one (the message says which).
    """
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise SummaryError(f"longer than {MAX_TEXT} characters")
    folded = text.upper()
    try:
        if folded.startswith(B32_PREFIX):
            payload = folded[len(B32_PREFIX):]
            if payload in (NO_DATA.upper(), SHORT.upper()):
                return None
            packed = base64.b32decode(payload)
        elif text.startswith(PREFIX):
            payload = text[len(PREFIX):]
            if payload in (NO_DATA, SHORT):
                return None
            packed = base64.b64decode(payload, validate=True)
        elif folded.startswith(PREFIX):
            raise SummaryError(
                "stored in lower case (this Slurm's sacctmgr lowercases AdminComment; "
                "store with gpu-exporter report job --store, which falls back to JS1B32:)")
        else:
            raise SummaryError("not a JS1: summary")
    except (binascii.Error, ValueError) as exc:
        if isinstance(exc, SummaryError):
            raise
        raise SummaryError(f"damaged encoding ({exc})") from None
    return _from_json(_inflate(packed), kind, name)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _from_json(doc: dict[str, Any], kind: str, name: str) -> JobSummary:
    ours = _mapping(doc.get(_OURS))
    end = _number(ours.get("end")) or 0.0
    start = _number(ours.get("start"))
    total = _number(doc.get("total_time")) or 0.0
    summary = JobSummary(
        kind=str(ours.get("kind") or kind), name=str(ours.get("name") or name),
        start=start if start is not None else end - total, end=end,
        user=str(ours.get("user") or ""), state=str(ours.get("state") or ""), source="stored",
        gpu_count=int(_number(doc.get("gpus")) or 0))
    for node_name, node in sorted(doc["nodes"].items()):
        if not isinstance(node, dict):
            continue
        summary.gpus.extend(_node_gpus(str(node_name), node))
        cpu = {k: v for k in ("cpus", "total_time", "total_memory", "used_memory")
               if (v := _number(node.get(k))) is not None}
        if cpu:
            summary.cpu[str(node_name)] = cpu
    finish(summary)
    return summary


def _node_gpus(node_name: str, node: dict[str, Any]) -> list[GpuSummary]:
    """A node's GPUs: gpu-exporter's figures where stored, else Jobstats' three."""
    jobstats = {key: _mapping(node.get(key)) for key in (
        "gpu_utilization", "gpu_used_memory", "gpu_total_memory")}
    ours = _mapping(node.get(_OURS))
    keys = sorted({*ours, *(k for values in jobstats.values() for k in values)},
                  key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0, k))
    gpus = []
    for key in keys:
        mine = _mapping(ours.get(key))
        figures = {k: number for k, v in mine.items()
                   if k in _FIGURE_KEYS and (number := _number(v)) is not None}
        for field, figure, scale in (("gpu_utilization", "utilization_ratio", 0.01),
                                     ("gpu_used_memory", "memory_peak_bytes", 1.0),
                                     ("gpu_total_memory", "memory_total_bytes", 1.0)):
            value = _number(jobstats[field].get(key))
            if figure not in figures and value is not None:
                figures[figure] = value * scale
        gpus.append(GpuSummary(  # Jobstats' own summaries key GPUs by minor number only
            node=node_name, gpu=str(mine.get("gpu", key)), uuid=str(mine.get("uuid", "")),
            model=str(mine.get("model", "")),
            minor_number=str(mine.get("minor_number", key)), figures=figures))
    return gpus

"""Server-side rendering of the landing page from one ``ExporterState``.

Every value that comes from a snapshot (GPU names, user and process names, errors) is
HTML-escaped; the template itself (``index.html``) only has ``$name`` placeholders.
"""

from __future__ import annotations

import html
import time
from functools import lru_cache
from importlib import resources
from string import Template

from exporter.catalogue import thresholds
from exporter.catalogue.metrics import (
    MEMORY_USED,
    POWER_LIMIT,
    POWER_USAGE,
    TEMPERATURE,
    UTILIZATION,
)
from exporter.catalogue.metrics.process import last_active_seconds
from exporter.report.timerange import format_duration
from exporter.snapshot import GpuProcess, GpuReading, gpu_activity
from exporter.state import ExporterState

__all__ = ["TOP_PROCESSES", "render_landing"]

#: Rows in the "top processes" table.
TOP_PROCESSES = 15
#: A process whose kernels ran this recently is shown "active" rather than idle for seconds.
ACTIVE_WITHIN_SECONDS = 60.0


@lru_cache(maxsize=1)
def _template() -> Template:
    """The page template with the stylesheet inlined (read once from package data).

    Raises:
        OSError: the package data is missing (a broken install).
    """
    web = resources.files("exporter.web")
    style = web.joinpath("style.css").read_text(encoding="utf-8")
    text = web.joinpath("index.html").read_text(encoding="utf-8")
    return Template(Template(text).safe_substitute(style=style))


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 2**30:.1f} GiB"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f} %"


def _hints(gpu: GpuReading) -> str:
    hints = []
    used, total = gpu.value(MEMORY_USED.name), gpu.identity.memory_total_bytes
    ratio = used / total if used is not None and total > 0 else None
    activity = gpu_activity(gpu)
    temperature = gpu.value(TEMPERATURE.name)
    # The alerts' thresholds (the page sees one sample, the alerts an average over time).
    if ratio is not None and ratio > thresholds.MEMORY_USED_RATIO:
        hints.append("memory almost full")
    if (ratio is not None and ratio > thresholds.IDLE_GPU_MEMORY_RATIO
            and activity is not None and activity < thresholds.IDLE_UTILIZATION_RATIO):
        hints.append("memory held but GPU idle")
    if temperature is not None and temperature > thresholds.TEMPERATURE_WARNING_CELSIUS:
        hints.append("hot: check cooling")
    return "; ".join(hints)


def _gpu_row(gpu: GpuReading) -> str:
    ident = gpu.identity
    label = f"{ident.index}"
    name = f'{_e(ident.name)}<br><small class="uuid">{_e(ident.uuid)}</small>'
    if not gpu.up:
        error = _e(gpu.error or "not answering")
        return (
            f'<tr class="down"><td>{_e(label)}</td><td>{name}</td>'
            f'<td colspan="6">down: {error}</td></tr>'
        )
    used, total = gpu.value(MEMORY_USED.name), ident.memory_total_bytes
    memory = f"{_gib(used)} / {_gib(total)}"
    if used is not None and total > 0:
        ratio = min(1.0, used / total)
        high = " high" if ratio > thresholds.MEMORY_USED_RATIO else ""
        memory += (
            f' ({ratio * 100:.0f} %)<span class="bar{high}" '
            f'style="width:{ratio * 5:.2f}rem"></span>'
        )
    celsius = gpu.value(TEMPERATURE.name)
    watts, limit = gpu.value(POWER_USAGE.name), gpu.value(POWER_LIMIT.name)
    temperature = "n/a" if celsius is None else f"{celsius:.0f} °C"
    power = "n/a" if watts is None else f"{watts:.0f} W"
    if watts is not None and limit is not None:
        power += f" / {limit:.0f} W"
    return (
        f"<tr><td>{_e(label)}</td><td>{name}</td><td class=\"num\">{memory}</td>"
        f'<td class="num">{_pct(gpu.value(UTILIZATION.name))}</td>'
        f'<td class="num">{_e(temperature)}</td><td class="num">{_e(power)}</td>'
        f'<td class="num">{len(gpu.processes)}</td><td class="hint">{_e(_hints(gpu))}</td></tr>'
    )


def _idle_for(process: GpuProcess, now: float) -> str:
    """How long since the process's kernels last ran, from its last-active time."""
    if process.sm_utilization_ratio is None:
        return "n/a"  # per-process utilisation is not collected
    last = last_active_seconds(process)
    if last is None:
        return "no kernel seen"
    idle = now - last
    return "active" if idle < ACTIVE_WITHIN_SECONDS else format_duration(idle)


def _pod(process: GpuProcess) -> str:
    """``namespace/pod`` of a process in a Kubernetes pod, else empty."""
    labels = process.workload.labels if process.workload is not None else {}
    return f"{labels.get('namespace') or '?'}/{labels['pod']}" if labels.get("pod") else ""


def _process_row(gpu: GpuReading, process: GpuProcess, now: float, with_pod: bool) -> str:
    owner = process.owner
    user = owner.user if owner is not None else "unknown"
    name = owner.name if owner is not None else "unknown"
    pod = f"<td>{_e(_pod(process))}</td>" if with_pod else ""
    return (
        f"<tr><td>{gpu.identity.index}</td><td>{process.pid}</td><td>{_e(user)}</td>"
        f"<td>{_e(name)}</td>{pod}"
        f'<td class="num">{_gib(process.used_memory_bytes)}</td>'
        f'<td class="num">{_pct(process.sm_utilization_ratio)}</td>'
        f'<td class="num idle">{_e(_idle_for(process, now))}</td></tr>'
    )


def _process_table(gpus: tuple[GpuReading, ...], now: float) -> tuple[str, list[str]]:
    """The header and rows of the top processes; the Pod column only when one of them is in a
    pod (a workstation has none)."""
    pairs = [(gpu, p) for gpu in gpus if gpu.up for p in gpu.processes]
    pairs.sort(key=lambda pair: pair[1].used_memory_bytes or 0, reverse=True)
    top = pairs[:TOP_PROCESSES]
    with_pod = any(_pod(p) for _, p in top)
    columns = ["GPU", "PID", "User", "Process", *(["Pod"] if with_pod else []), "Memory",
               "SM utilisation", "Idle for"]
    header = "".join(f"<th>{column}</th>" for column in columns)
    rows = [_process_row(gpu, p, now, with_pod) for gpu, p in top]
    return header, rows or [f'<tr><td colspan="{len(columns)}">No processes.</td></tr>']


def render_landing(
    state: ExporterState,
    *,
    version: str,
    metrics_path: str,
    refresh_seconds: int = 0,
    now: float | None = None,
    api_docs: bool = False,
) -> str:
    """The landing page HTML for ``state``.

    ``refresh_seconds`` > 0 adds a meta refresh (no JavaScript, so a strict CSP holds);
    ``api_docs`` links /docs (served only with --web.api-docs).

    Raises:
        OSError: the template is missing from the installed package.
    """
    snap = state.snapshot
    gpus = tuple(sorted(snap.gpus, key=lambda g: g.identity.index))
    notice = ""
    if not snap.source_up:
        notice = f'<p class="notice" id="source-error">Source down: {_e(snap.source_error)}</p>'
    elif state.stale:
        notice = '<p class="notice">Stale data: the latest collection did not finish in time.</p>'
    gpu_rows = [_gpu_row(g) for g in gpus] or ['<tr><td colspan="8">No GPUs.</td></tr>']
    process_header, process_rows = _process_table(gpus, snap.taken_at)
    driver = snap.driver_version or "n/a"
    if snap.cuda_driver_version:
        driver += f" (CUDA {snap.cuda_driver_version})"
    refresh_meta = (
        f'<meta http-equiv="refresh" content="{refresh_seconds}">' if refresh_seconds > 0 else ""
    )
    refresh_note = (
        f"Refreshes every {refresh_seconds} s."
        if refresh_seconds > 0
        else 'Add <a href="?refresh=5">?refresh=5</a> to refresh every 5 s.'
    )
    rendered = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    return _template().substitute(
        refresh_meta=refresh_meta,
        hostname=_e(snap.hostname),
        version=_e(version),
        metrics_path=_e(metrics_path),
        source=_e(snap.source) + ("" if snap.source_up else " (down)"),
        driver=_e(driver),
        data_age=_e(f"{state.data_age_seconds:.1f} s" + (" (stale)" if state.stale else "")),
        notice=notice,
        gpu_rows="\n".join(gpu_rows),
        process_header=process_header,
        process_rows="\n".join(process_rows),
        rendered_at=_e(rendered),
        refresh_note=refresh_note,
        docs_link='<a href="/docs">API docs</a>' if api_docs else "",
    )

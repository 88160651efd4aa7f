"""The report as one self-contained HTML page: tables and small inline SVG charts.

No script, no external resource (the page carries a Content-Security-Policy that forbids
both), so it can be mailed, archived or served from anywhere. Every label is HTML-escaped.
"""

from __future__ import annotations

import html

from exporter.report.formats import empty_sections, explanation, sections, summary_lines
from exporter.report.model import HOUR, Report, Row

__all__ = ["COLOURS", "render_html"]

#: Chart colours (the screenshot test counts their pixels).
COLOURS = {"used": "#2f6fd0", "idle": "#d0503a", "held": "#b8bec9", "day_idle": "#e08a1e"}
TOP_USERS = 10
_BAR_HEIGHT = 18
_LABEL_WIDTH = 140
_CHART_WIDTH = 560

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1d232a; }
table { border-collapse: collapse; margin-bottom: 1.2rem; }
th, td { padding: 0.25rem 0.6rem; border-bottom: 1px solid #dde; text-align: left; }
th { background: #f3f4f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.charts { display: flex; flex-wrap: wrap; gap: 2rem; }
figure { margin: 0; }
figcaption { font-weight: 600; margin-bottom: 0.3rem; }
.legend span { display: inline-block; width: 0.8rem; height: 0.8rem; margin: 0 0.3rem 0 0.8rem;
               vertical-align: middle; }
.note { color: #667; font-size: 0.85rem; }
svg text { font-size: 11px; fill: #333; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _user_chart(users: list[Row]) -> str:
    """Per user, one bar of GPU-hours held: used (blue), idle (red), the rest (grey)."""
    rows = users[:TOP_USERS]
    scale_max = max((row.usage.held_gpu_seconds for row in rows), default=0.0) or 1.0
    width = _CHART_WIDTH - _LABEL_WIDTH - 60
    height = len(rows) * (_BAR_HEIGHT + 6) + 6
    parts = [f'<svg class="chart" id="chart-users" width="{_CHART_WIDTH}" height="{height}" '
             f'viewBox="0 0 {_CHART_WIDTH} {height}" role="img" '
             'aria-label="GPU-hours held per user: used, idle, other">']
    for i, row in enumerate(rows):
        u = row.usage
        y = 6 + i * (_BAR_HEIGHT + 6)
        used = max(0.0, u.used_gpu_seconds) / scale_max * width
        idle = max(0.0, u.idle_gpu_seconds) / scale_max * width
        rest = max(0.0, u.held_gpu_seconds - u.used_gpu_seconds - u.idle_gpu_seconds)
        rest_w = rest / scale_max * width
        x = float(_LABEL_WIDTH)
        parts.append(f'<text x="{_LABEL_WIDTH - 6}" y="{y + 13}" text-anchor="end">'
                     f"{_e(row.labels.get('user', '?'))}</text>")
        for colour, w in ((COLOURS["used"], used), (COLOURS["idle"], idle),
                          (COLOURS["held"], rest_w)):
            if w > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                             f'height="{_BAR_HEIGHT}" fill="{colour}"/>')
                x += w
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 13}">'
                     f"{u.held_gpu_seconds / HOUR:,.1f} h</text>")
    parts.append("</svg>")
    legend = ('<div class="legend"><span style="background:{used}"></span>used'
              '<span style="background:{idle}"></span>held idle'
              '<span style="background:{held}"></span>held, other</div>').format(**COLOURS)
    return ("<figure><figcaption>GPU-hours held per user</figcaption>" + "".join(parts)
            + legend + "</figure>")


def _day_chart(report: Report) -> str:
    """Idle GPU-hours per day (columns), against GPU-hours held that day (grey)."""
    days = report.days
    top = max((d.usage.held_gpu_seconds for d in days), default=0.0) or 1.0
    plot_h, col_w, gap = 160, 28, 10
    width = max(200, len(days) * (col_w + gap) + 50)
    height = plot_h + 40
    parts = [f'<svg class="chart" id="chart-days" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" '
             'aria-label="Idle GPU-hours per day against GPU-hours held">']
    for i, day in enumerate(days):
        x = 40 + i * (col_w + gap)
        held_h = day.usage.held_gpu_seconds / top * plot_h
        idle_h = day.usage.idle_gpu_seconds / top * plot_h
        parts.append(f'<rect x="{x}" y="{10 + plot_h - held_h:.1f}" width="{col_w}" '
                     f'height="{held_h:.1f}" fill="{COLOURS["held"]}"/>')
        if idle_h > 0:
            parts.append(f'<rect x="{x}" y="{10 + plot_h - idle_h:.1f}" width="{col_w}" '
                         f'height="{idle_h:.1f}" fill="{COLOURS["day_idle"]}"/>')
        label = html.escape(_day_label(day.start))
        parts.append(f'<text x="{x + col_w / 2}" y="{plot_h + 26}" '
                     f'text-anchor="middle">{label}</text>')
    parts.append(f'<text x="4" y="16">{top / HOUR:,.0f} h</text>')
    parts.append("</svg>")
    legend = ('<div class="legend"><span style="background:{day_idle}"></span>held idle'
              '<span style="background:{held}"></span>held</div>').format(**COLOURS)
    return ("<figure><figcaption>GPU-hours per day</figcaption>" + "".join(parts) + legend
            + "</figure>")


def _day_label(start: float) -> str:
    import time  # noqa: PLC0415

    return time.strftime("%m-%d", time.gmtime(start))


def _table(title: str, header: list[str], rows: list[list[str]]) -> str:
    numeric = [all(_numeric(row[i]) for row in rows) for i in range(len(header))]
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{_e(c)}</td>' if n else f"<td>{_e(c)}</td>"
            for c, n in zip(row, numeric, strict=True)) + "</tr>"
        for row in rows
    )
    return f"<h2>{_e(title)}</h2><table><tr>{head}</tr>{body}</table>"


def _numeric(cell: str) -> bool:
    return cell == "-" or cell.replace(",", "").replace(".", "").replace(" %", "").isdigit()


def render_html(report: Report) -> str:
    """The page."""
    head = summary_lines(report)
    tables = "".join(_table(*section) for section in sections(report))
    tables += "".join(f"<h2>{_e(title)}</h2><p>None: {_e(why)}.</p>"
                      for title, why in empty_sections(report))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>{_e(head[0])}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{_e(head[0])}</h1>"
        + "".join(f"<p>{_e(line)}</p>" for line in head[1:])
        + f'<div class="charts">{_user_chart(report.users)}{_day_chart(report)}</div>'
        + tables
        + "".join(f'<p class="note">{_e(line)}</p>' for line in explanation())
        + '<p class="note">Generated by gpu-exporter report.</p></body></html>\n'
    )

"""Charts as server-rendered SVG: bars, stacked bars, lines and a timeline strip.

Each chart is an ``<svg role="img">`` with a ``<title>`` and a ``<desc>`` that says in
words what it shows (a screen reader reads that, not the shapes); the page beside it
keeps the numbers in a table. Colours are chosen for at least 3:1 contrast on white
(graphics, WCAG 1.4.11), and a series is never told apart by colour alone: each has a
label or a marker shape.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from html import escape

COLOURS = {
    "green": "#1a7f37", "yellow": "#9a6700", "red": "#cf222e", "blue": "#0550ae",
    "grey": "#57606a", "purple": "#8250df",
}  # fmt: skip
SERIES = ("blue", "purple", "green", "red", "yellow", "grey")
_chart_ids = itertools.count(1)


def _frame(width: int, height: int, title: str, desc: str, body: str) -> str:
    n = next(_chart_ids)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="chart" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'aria-labelledby="chart{n}-t chart{n}-d">'
        f'<title id="chart{n}-t">{escape(title)}</title><desc id="chart{n}-d">{escape(desc)}'
        f"</desc>{body}</svg>"
    )


def bars(
    values: Mapping[str, float], title: str, *, unit: str = "", colour: str = "blue",
    width: int = 420, row: int = 22,
) -> str:  # fmt: skip
    """Horizontal bars, one labelled row per key."""
    if not values:
        return _frame(width, 30, title, "nothing to show yet",
                      '<text x="4" y="20" class="empty">nothing yet</text>')  # fmt: skip
    top = max(values.values()) or 1.0
    label_w, bar_w = 150, width - 150 - 60
    rows = []
    for i, (name, v) in enumerate(values.items()):
        y = i * row + 4
        w = max(1.0, bar_w * v / top) if v else 0.0
        rows.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(name)}</text>'
            f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row - 6}" '
            f'fill="{COLOURS[colour]}"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 14}">{v:g}{escape(unit)}</text>'
        )
    desc = "; ".join(f"{k}: {v:g}{unit}" for k, v in values.items())
    return _frame(width, len(values) * row + 8, title, desc, "".join(rows))


def columns(
    series: Mapping[str, Sequence[float]], title: str, *, labels: Sequence[str] = (),
    width: int = 480, height: int = 140, colours: Mapping[str, str] | None = None,
) -> str:  # fmt: skip
    """Stacked columns over time slots: one column per slot, a segment per series."""
    names = list(series)
    slots = max((len(v) for v in series.values()), default=0)
    if not slots:
        return _frame(width, 30, title, "nothing to show yet",
                      '<text x="4" y="20" class="empty">nothing yet</text>')  # fmt: skip
    totals = [sum(series[n][i] for n in names if i < len(series[n])) for i in range(slots)]
    top = max(totals) or 1.0
    plot_h, legend_h = height - 36, 18
    col_w = (width - 40) / slots
    parts = [f'<line x1="36" y1="{plot_h}" x2="{width}" y2="{plot_h}" stroke="#57606a"/>',
             f'<text x="32" y="12" text-anchor="end">{top:g}</text>',
             f'<text x="32" y="{plot_h}" text-anchor="end">0</text>']  # fmt: skip
    for i in range(slots):
        y = float(plot_h)
        for j, name in enumerate(names):
            v = series[name][i] if i < len(series[name]) else 0
            if not v:
                continue
            h = (plot_h - 14) * v / top
            y -= h
            fill = COLOURS[(colours or {}).get(name, SERIES[j % len(SERIES)])]
            parts.append(f'<rect x="{40 + i * col_w:.1f}" y="{y:.1f}" '
                         f'width="{max(1.0, col_w - 2):.1f}" height="{h:.1f}" fill="{fill}">'
                         f"<title>{escape(name)}: {v:g}</title></rect>")  # fmt: skip
    if labels:
        parts.append(f'<text x="40" y="{plot_h + 14}">{escape(labels[0])}</text>'
                     f'<text x="{width}" y="{plot_h + 14}" text-anchor="end">'
                     f"{escape(labels[-1])}</text>")  # fmt: skip
    x = 40.0
    for j, name in enumerate(names):
        fill = COLOURS[(colours or {}).get(name, SERIES[j % len(SERIES)])]
        total = sum(series[name])
        parts.append(f'<rect x="{x:.0f}" y="{height - legend_h + 4}" width="10" height="10" '
                     f'fill="{fill}"/><text x="{x + 14:.0f}" y="{height - 4}">'
                     f"{escape(name)} ({total:g})</text>")  # fmt: skip
        x += 24 + 8 * len(name) + 8 * len(f"{total:g}")
    desc = "; ".join(f"{n}: {sum(series[n]):g} in all" for n in names)
    return _frame(width, height, title, f"{desc}, over {slots} slots", "".join(parts))


def lines(
    series: Mapping[str, Sequence[tuple[float, float]]], title: str, *,
    width: int = 480, height: int = 160, low: float = 0.0, high: float = 1.0,
) -> str:  # fmt: skip
    """Lines of (t, value) points, each series with its own marker shape and label."""
    points = [p for s in series.values() for p in s]
    if not points:
        return _frame(width, 30, title, "no points yet",
                      '<text x="4" y="20" class="empty">no points yet</text>')  # fmt: skip
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    span = (t1 - t0) or 1.0
    plot_h = height - 34

    def xy(t: float, v: float) -> tuple[float, float]:
        return 40 + (width - 50) * (t - t0) / span, 6 + (plot_h - 6) * (high - v) / (high - low)

    parts = [f'<line x1="40" y1="{plot_h}" x2="{width}" y2="{plot_h}" stroke="#57606a"/>',
             f'<text x="34" y="12" text-anchor="end">{high:g}</text>',
             f'<text x="34" y="{plot_h}" text-anchor="end">{low:g}</text>']  # fmt: skip
    descs = []
    for j, (name, pts) in enumerate(series.items()):
        colour = COLOURS[SERIES[j % len(SERIES)]]
        coords = [xy(t, v) for t, v in pts]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            dash = ' stroke-dasharray="5 3"' if j else ""
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                         f'stroke-width="2"{dash}/>')  # fmt: skip
        for x, y in coords:
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' if j == 0 else
                f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{colour}"/>'
            )  # fmt: skip
        parts.append(f'<text x="{40 + j * 200}" y="{height - 4}" fill="{colour}">'
                     f'{"&#9679;" if j == 0 else "&#9632;"} {escape(name)}</text>')  # fmt: skip
        if pts:
            descs.append(f"{name}: {len(pts)} points, from {pts[0][1]:.3f} to {pts[-1][1]:.3f}")
    return _frame(width, height, title, "; ".join(descs), "".join(parts))


TIMELINE_MARKS = {"pack": ("blue", "|"), "reboot": ("purple", "R"), "gap": ("yellow", "…"),
                  "refusal": ("red", "&#215;")}  # fmt: skip


def timeline(events: Sequence[Mapping[str, object]], title: str, *, width: int = 640) -> str:
    """One strip: a mark per event at its time, a row per kind (packs, reboots, gaps,
    refusals), each kind labelled."""
    kinds = list(TIMELINE_MARKS)
    times = [float(str(e["at_ms"])) for e in events]
    if not times:
        return _frame(width, 30, title, "no events yet",
                      '<text x="4" y="20" class="empty">no events yet</text>')  # fmt: skip
    t0, t1 = min(times), max(times)
    span = (t1 - t0) or 1.0
    row = 20
    parts = []
    for i, kind in enumerate(kinds):
        colour, mark = TIMELINE_MARKS[kind]
        y = 6 + i * row
        parts.append(f'<text x="70" y="{y + 12}" text-anchor="end">{kind}</text>'
                     f'<line x1="76" y1="{y + 8}" x2="{width - 6}" y2="{y + 8}" '
                     f'stroke="#d0d7de"/>')  # fmt: skip
        for e, t in zip(events, times, strict=True):
            if e["kind"] != kind:
                continue
            x = 80 + (width - 90) * (t - t0) / span
            parts.append(f'<text x="{x:.1f}" y="{y + 13}" text-anchor="middle" '
                         f'fill="{COLOURS[colour]}" font-weight="bold">{mark}'
                         f"<title>{escape(str(e['detail']))}</title></text>")  # fmt: skip
    counts = {k: sum(1 for e in events if e["kind"] == k) for k in kinds}
    desc = ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in counts.items())
    return _frame(width, len(kinds) * row + 12, title, desc, "".join(parts))

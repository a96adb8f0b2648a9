"""Server-drawn SVG charts of the task history (engine.history.stats): no chart library, no CDN,
readable without JavaScript, coloured by CSS custom properties (light and dark mode), and each
with a text summary (<title>, <desc>) that screen readers announce; the numbers themselves are in
the data table the template puts beside each chart."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 10, 22  # the plot's margins: y labels left, time labels below
_ids = count(1)


@dataclass(frozen=True, slots=True)
class Layer:
    label: str
    css: str  # a class of charts.css: its colour
    values: Sequence[float | None]


# Outcomes in stacking order: what went well at the bottom, failures on top where they show.
OUTCOME_LAYERS = (("succeeded", "Succeeded", "c-ok"), ("retried", "Retried", "c-retry"),
                  ("cancelled", "Cancelled", "c-cancel"), ("expired", "Expired", "c-expired"),
                  ("failed", "Failed", "c-fail"), ("dead_lettered", "Dead-lettered", "c-dead"))
FAILURE_LAYERS = tuple(layer for layer in OUTCOME_LAYERS if layer[0] in ("retried", "expired", "failed",
                                                                          "dead_lettered"))
PERCENTILE_LAYERS = (("p50", "p50", "c-p50"), ("p95", "p95", "c-p95"), ("p99", "p99", "c-p99"))


def nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above value (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def fmt(value: float, unit: str = "") -> str:
    if unit == "ms":
        if value >= 60000:
            return f"{value / 60000:.3g} min"
        if value >= 1000:
            return f"{value / 1000:.3g} s"
        return f"{value:.3g} ms"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.3g}M"
    if value >= 1000:
        return f"{value / 1000:.3g}k"
    return f"{value:g}"


def time_label(iso: str, step_s: int) -> str:
    """ "HH:MM" for ranges of minutes, "MM-DD HH:00" beyond (UTC, as the API's times)."""
    if step_s < 3600:
        return iso[11:16]
    if step_s >= 86400:
        return iso[5:10]
    return f"{iso[5:10]} {iso[11:13]}h"


def _frame(title: str, desc: str, times: Sequence[str], step_s: int, top: float, unit: str, body: list[str]
           ) -> SafeString:
    n = next(_ids)
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-labelledby="chart{n}-t chart{n}-d" preserveAspectRatio="xMidYMid meet">',
             f'<title id="chart{n}-t">{escape(title)}</title><desc id="chart{n}-d">{escape(desc)}</desc>']
    for fraction in (0, 0.5, 1):  # grid and y labels
        y = TOP + plot_h * (1 - fraction)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{escape(fmt(top * fraction, unit))}</text>')
    if times:
        for index, anchor in ((0, "start"), (len(times) // 2, "middle"), (len(times) - 1, "end")):
            x = LEFT + (WIDTH - LEFT - RIGHT) * (index + 0.5) / len(times)
            parts.append(f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}">'
                         f'{escape(time_label(times[index], step_s))}</text>')
    parts += body
    parts.append("</svg>")
    return mark_safe("".join(parts))


def stacked_bars(title: str, times: Sequence[str], step_s: int, layers: Sequence[Layer]) -> SafeString:
    """One bar per point, its layers stacked in order; the description states each layer's total."""
    n = len(times)
    totals = [sum(float(layer.values[i] or 0) for layer in layers) for i in range(n)]
    top = nice_max(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    width = plot_w / max(n, 1)
    gap = min(1.0, width * 0.15)
    body: list[str] = []
    for layer in layers:
        body.append(f'<g class="{layer.css}">')
        body.append("".join(
            f'<rect x="{LEFT + i * width + gap / 2:.1f}" y="{TOP + plot_h * (1 - (base + v) / top):.1f}" '
            f'width="{max(width - gap, 0.5):.1f}" height="{plot_h * v / top:.1f}"/>'
            for i, v, base in _stack(layers, layer, n) if v > 0))
        body.append("</g>")
    parts = [f"{layer.label} {fmt(sum(float(v or 0) for v in layer.values))}" for layer in layers]
    desc = f"Tasks per {per(step_s)}, stacked by outcome. Totals: {', '.join(parts)}; busiest {per(step_s)} " \
           f"{fmt(max(totals, default=0))}."
    return _frame(title, desc, times, step_s, top, "", body)


def _stack(layers: Sequence[Layer], layer: Layer, n: int) -> list[tuple[int, float, float]]:
    below = layers[:list(layers).index(layer)]
    return [(i, float(layer.values[i] or 0), sum(float(lower.values[i] or 0) for lower in below)) for i in range(n)]


def lines(title: str, times: Sequence[str], step_s: int, layers: Sequence[Layer], unit: str = "") -> SafeString:
    """A line per layer; a point without a value breaks the line (no samples then)."""
    n = len(times)
    values = [float(v) for layer in layers for v in layer.values if v is not None]
    top = nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    body: list[str] = []
    for layer in layers:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(layer.values):
            if v is None:
                runs.append([])
                continue
            x = LEFT + plot_w * (i + 0.5) / max(n, 1)
            runs[-1].append(f"{x:.1f},{TOP + plot_h * (1 - float(v) / top):.1f}")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                body.append(f'<circle class="{layer.css}" cx="{cx}" cy="{cy}" r="2"/>')
            elif run:
                body.append(f'<polyline class="{layer.css}" points="{" ".join(run)}"/>')
    parts = []
    for layer in layers:
        present = [float(v) for v in layer.values if v is not None]
        parts.append(f"{layer.label} highest {fmt(max(present), unit)}, latest {fmt(present[-1], unit)}"
                     if present else f"{layer.label} no data")
    desc = f"Per {per(step_s)}: {'; '.join(parts)}."
    return _frame(title, desc, times, step_s, top, unit, body)


def per(step_s: int) -> str:
    if step_s == 86400:
        return "day"
    if step_s % 3600 == 0:
        hours = step_s // 3600
        return "hour" if hours == 1 else f"{hours} hours"
    minutes = step_s // 60
    return "minute" if minutes == 1 else f"{minutes} minutes"


def outcome_layers(series: dict[str, list[int]], which: Sequence[tuple[str, str, str]] = OUTCOME_LAYERS
                   ) -> list[Layer]:
    return [Layer(label, css, series[key]) for key, label, css in which]


def percentile_layers(series: dict[str, list[float | None]]) -> list[Layer]:
    return [Layer(label, css, series[key]) for key, label, css in PERCENTILE_LAYERS]

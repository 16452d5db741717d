"""The HTML report's plots as inline SVG strings, drawn from a check-up's document type.

Each plot function takes a check-up (document.TraceReport, or one of a run's parts) and returns an SVG
element, or "" when there is nothing to draw. Every text that may come from a trace or from
another producer goes through `esc`. Tooltips are SVG <title> elements: no script needed.
"""

from __future__ import annotations

import html
import math

from gpucheckup.document import NvmlSeries, StepHistory, TraceReport
from gpucheckup.safe_text import safe

CAUSE_COLORS = {
    "busy": "#2e9e5b",
    "input": "#f28e2b",
    "sync": "#d62728",
    "communication": "#9467bd",
    "allocation": "#8c564b",
    "launch": "#e377c2",
    "other_host": "#8f8f8f",
    "queued": "#76b7e5",
}
CATEGORY_COLOR = "#5b7fa6"
DATA_MOVEMENT_COLOR = "#e8a33d"
THROTTLE_COLOR = "#f7c6c6"
AXIS = "#555"
GRID = "#e4e4e4"
WIDTH = 760
MIN_TEXT_PX = 10  # the smallest font-size of any chart text (at WIDTH)


def esc(x) -> str:
    """Escape text for HTML and SVG, quotes included; control and bidi characters shown escaped."""
    return html.escape(safe(x), quote=True)


def num(x: float) -> str:
    """A short human number: 3 significant digits, no exponent for usual ranges."""
    if x is None:
        return "-"
    ax = abs(x)
    if ax >= 1000 or float(x).is_integer():
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 10))
        t += step
    if ticks and ticks[-1] < hi - step * 1e-9:  # the top tick covers the largest value
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _svg(name: str, height: int, body: list[str], label: str) -> str:
    return (f'<svg class="chart" data-chart="{esc(name)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-label="{esc(label)}">' + "".join(body) + "</svg>")


def _rect(x, y, w, h, fill, tip: str = "", extra: str = "") -> str:
    t = f"<title>{esc(tip)}</title>" if tip else ""
    return (f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0):.2f}" height="{max(h, 0):.2f}" '
            f'fill="{fill}"{extra}>{t}</rect>')


def _text(x, y, s, anchor="start", size=11, extra="") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>{esc(s)}</text>'


def _line(x1, y1, x2, y2, stroke=AXIS, extra="") -> str:
    return f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="{stroke}"{extra}/>'


def _y_axis(x0, x1, y_of, ticks, unit="") -> list[str]:
    """Horizontal grid lines with labels on the left."""
    out = []
    for t in ticks:
        y = y_of(t)
        out.append(_line(x0, y, x1, y, GRID))
        out.append(_text(x0 - 4, y + 3.5, f"{num(t)}{unit}", anchor="end", size=10))
    out.append(_line(x0, y_of(ticks[0]), x0, y_of(ticks[-1]), AXIS))
    return out


def _legend(x, y, items: list[tuple[str, str]]) -> list[str]:
    """Colour swatches with labels in one row; returns the elements."""
    out = []
    for label, color in items:
        out.append(_rect(x, y - 9, 10, 10, color))
        out.append(_text(x + 14, y, label, size=10))
        x += 22 + 6.2 * len(label)
    return out


def steps_plot(r: TraceReport) -> str:
    """Step time per profiled step, with the median as a dashed line."""
    ms = r.steps.per_step_ms
    labels = r.steps.labels or [str(i) for i in range(len(ms))]
    if not ms:
        return ""
    h, left, right, top, bottom = 220, 56, 12, 14, 36
    ticks = nice_ticks(0, max(ms) * 1.05 or 1)
    hi = ticks[-1]
    plot_w = WIDTH - left - right
    plot_h = h - top - bottom

    def y_of(v):
        return top + plot_h * (1 - v / hi)

    body = _y_axis(left, WIDTH - right, y_of, ticks, " ms")
    slot = plot_w / len(ms)
    busy = r.gpu.step_busy_pct or []
    for i, v in enumerate(ms):
        b = f", GPU busy {busy[i]:.1f}%" if i < len(busy) else ""
        body.append(_rect(left + i * slot + slot * 0.12, y_of(v), slot * 0.76, y_of(0) - y_of(v), "#4e79a7",
                          f"{labels[i]}: {v:.3f} ms{b}"))
    every = max(1, math.ceil(len(ms) / 12))
    for i in range(0, len(ms), every):
        body.append(_text(left + (i + 0.5) * slot, h - bottom + 14, _short_label(labels[i]), anchor="middle",
                          size=10))
    med = r.steps.median_ms
    body.append(_line(left, y_of(med), WIDTH - right, y_of(med), "#d62728", ' stroke-dasharray="5,4"'))
    body.append(_text(WIDTH - right, y_of(med) - 4, f"median {med:.2f} ms", anchor="end", size=10,
                      extra=' fill="#d62728"'))
    body.append(_text(left, h - 4, "profiled step", size=10))
    return _svg("steps", h, body, "step time per step")


def _short_label(label: str) -> str:
    """`ProfilerStep#12` -> `#12`; other labels cut to 12 characters."""
    if label.startswith("ProfilerStep"):
        return label[len("ProfilerStep"):]
    return label if len(label) <= 12 else label[:11] + "…"


def step_history_plot(hist: StepHistory | None) -> str:
    """Step time over the whole run (from the run directory's steps.csv), profiled steps shaded."""
    if not hist or not hist.time_ms:
        return ""
    ys = [float(v) for v in hist.time_ms]
    xs = [float(v) for v in hist.step or range(len(ys))]
    h, left, right, top, bottom = 220, 56, 12, 14, 36
    ticks = nice_ticks(0, max(ys) * 1.05 or 1)
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    plot_w, plot_h = WIDTH - left - right, h - top - bottom

    def x_of(v):
        return left + plot_w * (v - x_lo) / (x_hi - x_lo)

    def y_of(v):
        return top + plot_h * (1 - v / ticks[-1])

    body = []
    prof = hist.profiled
    if prof and len(prof) == 2:
        a, b = x_of(max(float(prof[0]), x_lo)), x_of(min(float(prof[1]), x_hi))
        body.append(_rect(a, top, max(b - a, 2), plot_h, "#fff1c9", f"profiled steps {prof[0]}-{prof[1]}"))
    body += _y_axis(left, WIDTH - right, y_of, ticks, " ms")
    pts = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in zip(xs, ys))
    body.append(f'<polyline points="{pts}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>')
    for t in nice_ticks(x_lo, x_hi, 8):
        body.append(_text(x_of(t), h - bottom + 14, num(t), anchor="middle", size=10))
    body.append(_text(left, h - 4, f"training step ({hist.source})", size=10))
    return _svg("step_history", h, body, "step time over the whole run")


def timeline_plot(r: TraceReport) -> str:
    """Per step: where in the step the GPU is busy or idle (by cause), and the step's exact split."""
    tl = r.timeline
    rows = tl.rows
    if not rows:
        return ""
    states = tl.states
    row_h, gap_h, top, label_w = 16, 5, 40, 96
    split_w = 120
    pos_w = WIDTH - label_w - split_w - 16 - 40
    h = top + len(rows) * (row_h + gap_h) + 30
    body = _legend(label_w, 14, [(s.replace("_", " "), CAUSE_COLORS[s]) for s in states
                                 if s == "busy" or any(row.idle_ms.get(s, 0) > 0 for row in rows)])
    body.append(_text(label_w, top - 8, "position in the step (each row drawn to the longest step's scale)",
                      size=10, extra=' fill="#555"'))
    sx = label_w + pos_w + 16
    body.append(_text(sx, top - 8, "share of step time", size=10, extra=' fill="#555"'))
    bins = tl.bins
    multi_dev = len({row.device for row in rows}) > 1
    for k, row in enumerate(rows):
        y = top + k * (row_h + gap_h)
        name = _short_label(row.label) + (f" gpu{row.device}" if multi_dev else "")
        body.append(_text(label_w - 6, y + row_h - 4, name, anchor="end", size=10))
        for a, b, s in row.runs:
            state = states[s]
            body.append(_rect(label_w + pos_w * a / bins, y, pos_w * (b - a) / bins, row_h, CAUSE_COLORS[state],
                              f"{row.label}: mostly {state.replace('_', ' ')} "
                              f"from {a * tl.bin_ms:.3f} to {b * tl.bin_ms:.3f} ms"))
        dur = row.dur_ms or 1.0
        x = sx
        parts = [("busy", row.busy_ms)] + [(c, row.idle_ms.get(c, 0.0)) for c in states[1:]]
        for state, v in parts:
            if v <= 0:
                continue
            w = split_w * v / dur
            body.append(_rect(x, y, w, row_h, CAUSE_COLORS[state],
                              f"{row.label}: {state.replace('_', ' ')} {v:.3f} ms ({100 * v / dur:.1f}%)"))
            x += w
        body.append(_text(sx + split_w + 4, y + row_h - 4, f"{100 * row.busy_ms / dur:.0f}%", size=10))
    yb = top + len(rows) * (row_h + gap_h) + 12
    body.append(_line(label_w, yb - 6, label_w + pos_w, yb - 6, AXIS))
    for t in [t for t in nice_ticks(0, tl.scale_ms, 6) if t <= tl.scale_ms * 1.0001]:
        x = label_w + pos_w * t / tl.scale_ms if tl.scale_ms else label_w
        body.append(_line(x, yb - 6, x, yb - 2, AXIS))
        body.append(_text(x, yb + 8, f"{num(t)} ms", anchor="middle", size=10))
    return _svg("timeline", h, body, "GPU timeline overview: busy and idle by cause per step")


def gap_histogram_plot(r: TraceReport) -> str:
    """Idle gaps by duration (log-spaced bins), stacked by each gap's main cause: how many, and how much time."""
    hist = r.gaps.histogram
    edges = hist.edges_us
    if len(edges) < 2:
        return ""
    n = len(edges) - 1
    causes = [c for c, counts in hist.count.items() if sum(counts) > 0]
    left, right, top, panel_h, between = 64, 12, 30, 130, 34
    h = top + 2 * panel_h + between + 40
    plot_w = WIDTH - left - right
    slot = plot_w / n
    body = _legend(left, 12, [(c.replace("_", " "), CAUSE_COLORS[c]) for c in causes])
    for k, (series, title, unit) in enumerate(((hist.count, "number of gaps", ""), (hist.time_ms, "idle time", " ms"))):
        y0 = top + k * (panel_h + between)
        totals = [sum(series[c][i] for c in causes) for i in range(n)]
        ticks = nice_ticks(0, max(totals) or 1, 4)
        if series is hist.count:
            ticks = [t for t in ticks if float(t).is_integer()] or [0, 1]

        def y_of(v, y0=y0, top_v=ticks[-1] or 1.0):  # only 0 ticks: values below their rounding
            return y0 + panel_h * (1 - v / top_v)

        body += _y_axis(left, WIDTH - right, y_of, ticks, unit)
        body.append(_text(left + 6, y0 + 10, title, size=10, extra=' fill="#333"'))
        for i in range(n):
            base = 0.0
            for c in causes:
                v = series[c][i]
                if v <= 0:
                    continue
                body.append(_rect(left + i * slot + 1, y_of(base + v), slot - 2, y_of(base) - y_of(base + v),
                                  CAUSE_COLORS[c], f"{_dur(edges[i])}-{_dur(edges[i + 1])}: "
                                  f"{hist.count[c][i]} gaps mostly {c.replace('_', ' ')}, "
                                  f"{hist.time_ms[c][i]:.3f} ms idle"))
                base += v
        yb = y0 + panel_h
        for i, e in enumerate(edges):
            if abs(math.log10(e) - round(math.log10(e))) < 1e-6:
                x = left + i * slot
                body.append(_line(x, yb, x, yb + 4, AXIS))
                body.append(_text(x, yb + 15, _dur(e), anchor="middle", size=10))
    body.append(_text(left, h - 4, "gap duration (log scale, 4 bins per decade)", size=10))
    return _svg("gap_histogram", h, body, "histogram of idle gap durations by cause")


def _dur(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:g} s"
    if us >= 1e3:
        return f"{us / 1e3:g} ms"
    return f"{us:.3g} µs"


def categories_plot(r: TraceReport) -> str:
    """GPU kernel time by category, data movement highlighted."""
    cats = r.kernels.categories
    ms = r.kernels.categories_ms
    items = sorted(((c, p) for c, p in cats.items() if p > 0 or c == "data_movement"), key=lambda kv: -kv[1])
    if not items:
        return ""
    row_h, top, label_w = 22, 8, 130
    bar_w = WIDTH - label_w - 110
    h = top + len(items) * row_h + 10
    body = []
    for k, (c, p) in enumerate(items):
        y = top + k * row_h
        dm = c == "data_movement"
        style = ' font-weight="bold"' if dm else ""
        body.append(_text(label_w - 8, y + 14, c.replace("_", " "), anchor="end", size=11, extra=style))
        body.append(_rect(label_w, y + 2, max(bar_w * p / 100, 1.5), row_h - 6,
                          DATA_MOVEMENT_COLOR if dm else CATEGORY_COLOR,
                          f"{c}: {p:.1f}% of kernel time, {ms.get(c, 0):.3f} ms",
                          ' stroke="#8a5a00" stroke-width="1.5"' if dm else ""))
        body.append(_text(label_w + bar_w * p / 100 + 6, y + 14,
                          f"{p:.1f}%" + ("  data movement share" if dm else ""), size=11, extra=style))
    return _svg("categories", h, body, "GPU kernel time by category")


def nvml_plot(d: NvmlSeries | None) -> str:
    """NVML samples (the run's first GPU's): utilization, power and SM clock against time, throttled samples
    shaded."""
    t = [float(x) for x in d.t_s] if d else []
    if len(t) < 2:
        return ""
    series = [(values, title, unit) for values, title, unit in
              ((d.gpu_util, "GPU utilization", "%"), (d.power_w, "power", " W"), (d.sm_clock_mhz, "SM clock", " MHz"))
              if values]  # utilization on a fixed 0-100 scale
    panel_h, left, right, top = 110, 64, 12, 24
    h = top + len(series) * (panel_h + 14) + 28
    t0, t1 = min(t), max(t)
    plot_w = WIDTH - left - right

    def x_of(v):
        return left + plot_w * (v - t0) / ((t1 - t0) or 1)

    body = [_text(left, 12, "NVML samples", size=11, extra=' font-weight="bold"')]
    bands = []
    for i, flag in enumerate(d.throttled[: len(t)]):
        if flag:
            end = t[i + 1] if i + 1 < len(t) else t[i]
            why = "throttled"
            if bands and abs(bands[-1][1] - t[i]) < 1e-9 and bands[-1][2] == why:
                bands[-1][1] = end
            else:
                bands.append([t[i], end, why])
    if bands:
        body += _legend(WIDTH - 170, 12, [("throttled", THROTTLE_COLOR)])
    for k, (values, title, unit) in enumerate(series):
        y0 = top + k * (panel_h + 14)
        vals = [float(v) if v is not None else math.nan for v in values][: len(t)]
        finite = [v for v in vals if math.isfinite(v)]
        hi = 100.0 if unit == "%" else (max(finite, default=0.0) * 1.1 or 1.0)
        ticks = nice_ticks(0, hi, 3)

        def y_of(v, y0=y0, top_v=ticks[-1] or 1.0):  # only 0 ticks: values below their rounding
            return y0 + panel_h * (1 - v / top_v)

        for a, b, why in bands:
            body.append(_rect(x_of(a), y0, max(x_of(b) - x_of(a), 2), panel_h, THROTTLE_COLOR, why))
        body += _y_axis(left, WIDTH - right, y_of, ticks, unit)
        body.append(_text(left + 4, y0 + 11, title, size=10, extra=' fill="#333"'))
        pts = " ".join(f"{x_of(x):.1f},{y_of(v):.1f}" for x, v in zip(t, vals) if math.isfinite(v))
        body.append(f'<polyline points="{pts}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>')
    yb = top + len(series) * (panel_h + 14)
    for tick in nice_ticks(0, t1 - t0, 8):
        body.append(_text(x_of(t0 + tick), yb + 4, f"{num(tick)} s", anchor="middle", size=10))
    return _svg("nvml", h, body, "NVML utilization, power and SM clock")

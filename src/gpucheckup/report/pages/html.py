"""The HTML report: one self-contained page that opens offline, rendered from each report read through its
document type (document.trace_part; a run's run-level keys from its report dict).

Layout: verdict and ranked fixes first, then findings with their evidence, then the plots
(inline SVG from `plots`), then the tables. Several reports (ranks of one job, demo cases)
go on one page: a summary table linking to one section per report.

Safety: every string from a trace or another producer is escaped (`plots.esc`); the report
dicts are embedded as JSON in a non-executed <script type="application/json"> with <, >, &
and U+2028/9 escaped; a Content-Security-Policy forbids every fetch and allows only this
page's own script (by its hash), which sorts tables when a header is clicked.
"""

from __future__ import annotations

import base64
import hashlib


import msgspec

from gpucheckup import __version__
from gpucheckup.diagnosis.findings import TIER_TITLES
from gpucheckup.document import (
    ApiContention, Finding, Fix, NvmlSeries, SlowCall, TraceReport, Verdict, nvml_series, run_info, run_only,
    step_history, trace_part,
)
from gpucheckup.report.pages import plots
from gpucheckup.report import json_doc
from gpucheckup.report.text.hardware_text import (
    NCU_HEADERS, ROOFLINE_HEADERS, bands_line, mfu_line, ncu_rows, roofline_rows,
)
from gpucheckup.report.text.lines import (
    MAX_EVENTS, busy_line, cost_line, event_line, key_figures, plain_value, profiler_caveat, rel_ms, step_label,
    run_rows, saving_text, step_line, sync_rate, version_text,
)
from gpucheckup.report.pages.plots import esc, num
from gpucheckup.safe_text import UNSAFE

SORT_JS = """(function () {
  function key(cell) {
    var v = cell.getAttribute("data-v");
    if (v !== null && v !== "" && !isNaN(Number(v))) return [0, Number(v)];
    return [1, cell.textContent.trim().toLowerCase()];
  }
  function cmp(a, b) {
    if (a[0] !== b[0]) return a[0] - b[0];
    return a[1] < b[1] ? -1 : (a[1] > b[1] ? 1 : 0);
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.tabIndex = 0;
      function sort() {
        var now = th.getAttribute("aria-sort");
        var first = th.getAttribute("data-type") === "num" ? "descending" : "ascending";
        var next = now ? (now === "ascending" ? "descending" : "ascending") : first;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", next);
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r1, r2) {
          var c = cmp(key(r1.cells[col]), key(r2.cells[col]));
          return next === "ascending" ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
  });
})();
"""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;margin:0;background:#f6f7f9}
main{max-width:1000px;margin:0 auto;padding:18px 24px 60px;background:#fff}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:19px;margin:30px 0 8px;border-bottom:2px solid #ddd}
h3{font-size:16px;margin:24px 0 8px}h4{margin:0 0 4px;font-size:14px}
.meta{color:#666;font-size:12.5px;word-break:break-all}
.verdict{border-radius:8px;padding:12px 16px;margin:12px 0;background:#f2f5f9;border-left:8px solid #888}
.badge{display:inline-block;font-weight:700;color:#fff;padding:2px 8px;border-radius:4px;margin-right:8px;
background:#666}
.v-input_bound .badge{background:#c55a00}.v-launch_bound .badge{background:#a0309a}
.v-sync_bound .badge{background:#b71c1c}.v-copy_bound .badge{background:#1f4ea8}
.v-communication_bound .badge{background:#4b2a86}.v-gpu_bound .badge{background:#1e7b45}
.v-input_bound{border-color:#c55a00}.v-launch_bound{border-color:#a0309a}.v-sync_bound{border-color:#b71c1c}
.v-copy_bound{border-color:#1f4ea8}.v-communication_bound{border-color:#4b2a86}.v-gpu_bound{border-color:#1e7b45}
.kpis{color:#444;font-size:13px}
table{border-collapse:collapse;margin:6px 0 14px;font-size:12.5px;width:100%}
th,td{border-bottom:1px solid #e3e3e3;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.sortable th{cursor:pointer;user-select:none}table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
td.k{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11.5px;word-break:break-all}
.finding{border:1px solid #e0e0e0;border-left:5px solid #999;border-radius:6px;padding:8px 12px;margin:8px 0}
.sev-critical{border-left-color:#c62828}.sev-warning{border-left-color:#e0a000}.sev-info{border-left-color:#2a8fbd}
.sev{font-size:11px;text-transform:uppercase;color:#666;margin-right:6px}.cost{color:#666;font-weight:400}
.finding ul{margin:4px 0 4px 18px;padding:0}.events{color:#555;font-size:12px}
.rule{color:#777;font-size:12px;margin:4px 0 0}
figure.plot{margin:12px 0 22px;padding:0}figcaption{font-weight:600;margin-bottom:4px}
svg.chart{display:block;background:#fff;width:100%;height:auto;max-width:%(max_w)dpx;min-width:%(min_w)dpx}
figure.plot{overflow-x:auto}.scroll{overflow-x:auto;max-width:100%%;margin:6px 0 14px}.scroll table{margin:0}
main{overflow-wrap:break-word}.finding li,.verdict p,.explain,.note{overflow-wrap:anywhere}
.caveat{color:#8a5a00;font-size:13px}
@media (max-width:600px){main{padding:12px 10px 40px}table{font-size:12px}}
svg.chart text{fill:#333;font-family:system-ui,sans-serif}
.explain{color:#666;font-size:12px;margin:2px 0 0}.note{color:#555;font-size:12.5px}
"""
MIN_CHART_TEXT_PX = 9  # the smallest chart text on screen: charts shrink to this, then scroll in their box
CSS = CSS.replace("%(max_w)dpx", f"{round(plots.WIDTH * 1.25)}px").replace(
    "%(min_w)dpx", f"{round(plots.WIDTH * MIN_CHART_TEXT_PX / plots.MIN_TEXT_PX)}px").replace("%%", "%")


def render(items: list[tuple[str | None, dict]], summary_title: str = "Ranks", job_section: str = "") -> str:
    """A whole page: one report, or a summary table and one section per report (`job_section`: the ranks' job
    section, report/job_pages.html_section, first)."""
    many = len(items) > 1
    typed = [trace_part(r) for _, r in items]  # each report read through its document type
    parts = []
    if many:
        parts.append(f"<h1>gpucheckup check-up: {len(items)} traces</h1>")
        if job_section:
            parts.append(job_section)
        parts.append(_summary([(label, p) for (label, _), p in zip(items, typed)], summary_title))
    for i, ((label, r), p) in enumerate(zip(items, typed)):
        parts.append(_report(p, r, f"r{i}-", label, many))
    data = [r for _, r in items] if many else items[0][1]
    first = typed[0]
    title = (f"gpucheckup: {len(items)} traces" if many
             else f"gpucheckup: {first.verdict.primary} - {first.trace.path}")
    return _page(title, parts, data)


def render_run_only(r: dict) -> str:
    """A page for a run directory with no GPU timeline: why (or an out-of-process attach's coarse verdict), the
    run-level findings and fixes, the whole run's figures, its step times and NVML samples."""
    run = run_info(r)
    lead = run_only(r)
    v, fixes = lead.verdict, lead.fixes
    parts = ['<section class="report" id="r0-report"><h1>gpucheckup check-up</h1>',
             f'<p class="meta">{esc(run.path)}</p>',
             f'<div class="verdict"><span class="badge">{esc(_run_only_badge(v))}</span>'
             f'<p>{esc(v.reason)}</p></div>', _fixes(fixes)]
    if v.findings:
        parts += ["<h3>Findings</h3>", *(_finding(f) for f in v.findings)]
    drawn = [(name, svg) for name, svg in (("step_history", plots.step_history_plot(step_history(r))),
                                           ("nvml", plots.nvml_plot(nvml_series(r)))) if svg]
    if drawn:
        parts += ["<h3>Plots</h3>", *(_figure(name, svg, "r0-") for name, svg in drawn)]
    parts += ["<h3>Tables</h3>", _whole_run(r), _nvml_summary(nvml_series(r)), "</section>"]
    return _page(f"gpucheckup: no GPU timeline - {run.path}", [x for x in parts if x], r)


def _run_only_badge(v: Verdict) -> str:
    """NO GPU TIMELINE, or an out-of-process attach's coarse verdict said coarse (INPUT-BOUND (COARSE))."""
    return f"{v.primary.upper().replace('_', '-')} (COARSE)" if v.coarse else "NO GPU TIMELINE"


def _whole_run(r: dict) -> str:
    """The whole run's figures (report/text/lines.py run_rows, as the terminal prints them)."""
    if not r.get("run_figures"):
        return ""
    return "<h4>Whole run</h4>" + _table([("what", "t"), ("value", "t")],
                                         [[esc(k), esc(v)] for k, v in run_rows(r)], raw=True, last_class="k")


def _page(title: str, parts: list[str], data) -> str:
    """The self-contained page around the sections: CSP, styles, the embedded JSON, the sorting script."""
    script = SORT_JS
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
           "connect-src 'none'; font-src 'none'; object-src 'none'; frame-src 'none'; base-uri 'none'; "
           "form-action 'none'")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        f"<title>{esc(title)}</title>\n<link rel=\"icon\" href=\"data:,\">\n<style>{CSS}</style></head>\n"
        "<body><main>\n" + "\n".join(parts) +
        f"\n<p class=\"meta\">gpucheckup {esc(__version__)}. The check-up data is embedded in this page as JSON "
        "(script element <code>#gpucheckup-data</code>).</p>\n</main>\n"
        f"<script type=\"application/json\" id=\"gpucheckup-data\">{json_for_script(data)}</script>\n"
        f"<script>{script}</script>\n</body></html>\n"
    )


page = _page  # the self-contained page around any sections (try_pages.py renders into it too)


def json_for_script(obj) -> str:
    """JSON that is safe inside a <script> element: no `</script>`, `<!--`, or JS line terminators."""
    text = json_doc.encode(obj).decode()
    for ch, rep in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, rep)
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # C1 and bidi controls: the same data, escaped


def _summary(items: list[tuple[str | None, TraceReport]], title: str) -> str:
    body = []
    for i, (label, r) in enumerate(items):
        body.append([f'<a href="#r{i}-report">{esc(label or i)}</a>', esc(r.trace.path),
                     esc(r.verdict.primary), (r.window.step_ms, f"{r.window.step_ms:.2f}"),
                     (r.gpu.busy_pct, f"{r.gpu.busy_pct:.1f}%")])
    return f"<h2>{esc(title)}</h2>" + _table(
        [("report", "t"), ("trace", "t"), ("verdict", "t"), ("step ms", "n"),
         ("GPU busy", "n")], body, sortable=True, raw=True)


def _report(p: TraceReport, r: dict, prefix: str, label: str | None, many: bool) -> str:
    """One check-up's section: `p` its document part, `r` its report dict (for its run's run-level keys)."""
    t, s = p.trace, p.steps
    dev = ", ".join(sorted({d.name for d in t.devices})) or "GPU (no device properties in trace)"
    steps = f"{s.count} steps, median {s.median_ms:.2f} ms" if s.marked else "no ProfilerStep markers"
    rank = f" | rank {t.rank}" if t.rank is not None else ""
    head = (f"<h2>{esc(label)}</h2>" if many else "<h1>gpucheckup check-up</h1>")
    out = [f'<section class="report" id="{prefix}report">', head,
           f'<p class="meta">{esc(t.path)}<br>{esc(dev)}{esc(rank)} | {esc(steps)}</p>',
           _verdict(p), _fixes(p.fixes), "<h3>Findings</h3>", *(_finding(f) for f in p.verdict.findings),
           "<h3>Plots</h3>", _plots(p, r, prefix), "<h3>Tables</h3>", _tables(p, r)]
    if p.notes:
        out.append("<h3>Notes</h3><ul>" + "".join(f'<li class="note">{esc(n)}</li>' for n in p.notes) + "</ul>")
    out.append("</section>")
    return "\n".join(out)


def _verdict(r: TraceReport) -> str:
    v, k = r.verdict, r.kernels
    kpis = (f"{busy_line(r)} | {step_line(r)} | {k.count} kernels, "
            f"mean {k.mean_us:.1f} us, {k.small_pct:.0f}% under 20 us | DataLoader "
            f"{r.dataloader.pct_of_step:.1f}% of step | syncs {sync_rate(r)}")
    caveat = f'<p class="caveat">{esc(profiler_caveat(r))}</p>' if profiler_caveat(r) else ""
    return (f'<div class="verdict v-{esc(v.primary)}"><span class="badge">'
            f'{esc(v.primary.upper().replace("_", "-"))}</span><b>{esc(v.title)}</b>'
            f'<p>{esc(v.reason)}</p><p class="kpis">{esc(kpis)}</p>{caveat}</div>')


def _fixes(fixes: list[Fix]) -> str:
    rows = []
    for i, fx in enumerate(fixes, 1):
        saving = esc(saving_text(fx))
        rank = fx.predicted.saving_ms if fx.predicted else (fx.saving_ms or 0)  # None: not finite
        how = f"<br><span class=\"explain\">{esc(fx.how)}</span>" if fx.how else ""
        if fx.reason:
            how += f"<br><span class=\"explain\">saving: {esc(fx.reason)}</span>"
        rows.append([(i, str(i)), esc(TIER_TITLES.get(fx.tier, fx.tier)), esc(fx.action) + how,
                     (rank, saving), esc(fx.finding)])
    if not rows:
        return "<h3>What to try first</h3><p>No fix suggested: no finding above its threshold.</p>"
    return "<h3>What to try first</h3>" + _table(
        [("#", "n"), ("change", "t"), ("fix", "t"), ("predicted saving", "n"), ("finding", "t")], rows, raw=True)


def _finding(f: Finding) -> str:
    ev = "".join(f"<li>{esc(e)}</li>" for e in f.evidence)
    events = "".join(f"<li>{esc(event_line(e))}</li>" for e in f.events[:MAX_EVENTS])
    events = f'<ul class="events">{events}</ul>' if events else ""
    fixes = "".join(f"<li>{esc(x.action)} <span class=\"cost\">({esc(TIER_TITLES.get(x.tier, x.tier))})"
                    "</span></li>" for x in f.fix)
    fixes = f"<b>fixes</b><ul>{fixes}</ul>" if fixes else ""
    return (f'<div class="finding sev-{esc(f.severity)}"><h4><span class="sev">{esc(f.severity)}</span>'
            f'{esc(f.title)} <span class="cost">{esc(cost_line(f))}</span></h4><ul>{ev}</ul>{events}{fixes}'
            f'<p class="rule">rule: {esc(f.rule)}</p></div>')


PLOT_TEXT = {
    "steps": ("Step time per profiled step",
              "Each bar is one step window; the dashed line is the median, the report's step time."),
    "step_history": ("Step time over the whole run",
                     "From the run directory's steps.csv; the shaded band marks the profiled steps."),
    "timeline": ("GPU timeline overview",
                 "Left: each step from its start, drawn to the longest step's scale; each sliver shows what "
                 "holds most of that time: busy, or idle with the cause of the gap. Right: the step's exact "
                 "split of busy time and idle time by cause, and its GPU busy %."),
    "gap_histogram": ("Idle gaps by duration and cause",
                      "Idle gaps in log-spaced duration bins (4 per decade), each gap coloured by the cause that "
                      "holds most of it: how many (top) and how much idle time they hold (bottom). A few long gaps "
                      "often cost more than thousands of short ones."),
    "categories": ("GPU time by kernel category",
                   "Share of kernel time; data movement (index, gather, scatter, sort, copy-like kernels) is "
                   "highlighted."),
    "nvml": ("GPU samples from NVML",
             "Utilization, power and SM clock as sampled by NVML; shaded stretches are samples where the GPU "
             "reported throttling."),
}


def _plots(p: TraceReport, r: dict, prefix: str) -> str:
    drawn = [
        ("steps", plots.steps_plot(p)),
        ("step_history", plots.step_history_plot(step_history(r))),
        ("timeline", plots.timeline_plot(p)),
        ("gap_histogram", plots.gap_histogram_plot(p)),
        ("categories", plots.categories_plot(p)),
        ("nvml", plots.nvml_plot(nvml_series(r))),
    ]
    out = []
    for name, svg in drawn:
        if not svg:
            continue
        extra = ""
        if name == "timeline" and p.timeline.truncated:
            extra = f" {p.timeline.truncated} more step rows are not drawn."
        out.append(_figure(name, svg, prefix, extra))
    return "\n".join(out)


def _figure(name: str, svg: str, prefix: str, extra: str = "") -> str:
    title, text = PLOT_TEXT[name]
    return (f'<figure class="plot" id="{prefix}plot-{name}" data-plot="{name}"><figcaption>{esc(title)}'
            f'</figcaption>{svg}<p class="explain">{esc(text + extra)}</p></figure>')


def _tables(p: TraceReport, r: dict) -> str:
    out = [_key_figures(p), _hardware(p), _per_step(p), _top_kernels(p), _data_movement(p), _longest_gaps(p),
           _copies(p), _syncs(p), _communication(p), _cuda_api(p), _whole_run(r), _nvml_summary(nvml_series(r)),
           _environment(p, r)]
    return "\n".join(x for x in out if x)


def _key_figures(r: TraceReport) -> str:
    rows = [[esc(k), esc(v)] for k, v in key_figures(r)]
    return "<h4>Key figures</h4>" + _table([("figure", "t"), ("value", "n")], rows, raw=True)


def _hardware(r: TraceReport) -> str:
    """MFU against the bands, the roofline of the top GEMM ops, and Nsight Compute bounds when imported."""
    rows = [["MFU", esc(mfu_line(r))]]
    if bands_line(r):
        rows.append(["healthy bands", esc(bands_line(r))])
    out = ["<h4>How close to the hardware</h4>" + _table([("figure", "t"), ("value", "t")], rows, raw=True)]
    roof = roofline_rows(r)
    if roof:
        out.append("<h4>Top GEMM/conv/attention ops against the roofline</h4>" + _table(
            [(c, "t" if i in (0, 1, 5) else "n") for i, c in enumerate(ROOFLINE_HEADERS)],
            [[esc(x) for x in row] for row in roof], raw=True))
    ncu = ncu_rows(r)
    if ncu:
        out.append("<h4>Nsight Compute bounds of the top kernels</h4>" + _table(
            [(c, "t" if i in (0, 2) else "n") for i, c in enumerate(NCU_HEADERS)],
            [[esc(x) for x in row] for row in ncu], raw=True))
    return "\n".join(out)


def step_rows(r: TraceReport) -> tuple[list[str], list[list]]:
    """Per step row: label, device, step ms, busy ms, busy %, idle ms by each cause that occurs (shared with
    Markdown)."""
    rows = r.timeline.rows
    causes = [c for c in r.timeline.states[1:] if any(row.idle_ms.get(c, 0) > 0 for row in rows)]
    out = []
    for row in rows:
        dur = row.dur_ms or 1.0
        out.append([row.label.removeprefix("ProfilerStep"), row.device, row.dur_ms, row.busy_ms,
                    100 * row.busy_ms / dur]
                   + [row.idle_ms[c] for c in causes])
    return causes, out


def _per_step(r: TraceReport) -> str:
    causes, rows = step_rows(r)
    if not rows:
        return ""
    body = [[esc(x[0]), (x[1], str(x[1])), (x[2], f"{x[2]:.3f}"), (x[3], f"{x[3]:.3f}"), (x[4], f"{x[4]:.1f}")]
            + [(v, f"{v:.3f}") for v in x[5:]] for x in rows]
    cols = [("step", "t"), ("GPU", "n"), ("step ms", "n"), ("GPU busy ms", "n"), ("GPU busy %", "n")] + [
        (f"idle ms: {c.replace('_', ' ')}", "n") for c in causes]
    return "<h4>Steps</h4>" + _table(cols, body, sortable=True, raw=True)


def _top_kernels(r: TraceReport) -> str:
    rows = []
    for t in r.kernels.top:
        rows.append([f'<span title="{esc(t.name)}">{esc(t.label or t.name)}</span>',
                     esc(t.category), (t.count, str(t.count)), (t.total_ms, f"{t.total_ms:.3f}"),
                     (t.mean_us, f"{t.mean_us:.1f}"), (t.pct, f"{t.pct:.1f}%")])
    if not rows:
        return ""
    return ("<h4>Top kernels <span class=\"cost\">(click a header to sort; hover a name for the full name)"
            "</span></h4>" + _table([("kernel", "t"), ("category", "t"), ("count", "n"), ("total ms", "n"),
                                     ("mean us", "n"), ("share of kernel time", "n")], rows, sortable=True,
                                    raw=True, cls="kernels", first_class="k"))


def _data_movement(r: TraceReport) -> str:
    fam = r.kernels.data_movement
    if not fam:
        return ""
    rows = [[esc(f.family), (f.pct, f"{f.pct:.1f}%"), (f.total_ms, f"{f.total_ms:.3f}"), (f.count, str(f.count)),
             "<br>".join(f'<span title="{esc(k)}">{esc(label)}</span>'
                         for k, label in list(zip(f.kernels, f.labels or f.kernels))[:3])]
            for f in fam]
    return "<h4>Data movement kernels</h4>" + _table(
        [("family", "t"), ("share of kernel time", "n"), ("total ms", "n"), ("count", "n"), ("kernels", "t")],
        rows, sortable=True, raw=True, cls="datamove", last_class="k")


def _longest_gaps(r: TraceReport) -> str:
    gaps = r.gaps.longest
    if not gaps:
        return ""
    rows = [[(rel_ms(r, g.t_us), f"{rel_ms(r, g.t_us):.3f}"), (g.dur_us, f"{g.dur_us / 1000:.3f}"),
             (g.device, str(g.device)), esc(step_label(r, g.step)), (g.position, f"{g.position:.2f}"),
             esc(g.cause)] for g in gaps]
    return "<h4>Longest idle gaps</h4>" + _table(
        [("starts at (ms from the trace's start)", "n"), ("ms", "n"), ("GPU", "n"), ("step", "t"),
         ("position in step", "n"), ("main cause", "t")], rows, sortable=True, raw=True)


def _copies(r: TraceReport) -> str:
    c = r.copies
    rows = []
    for d, e in sorted(c.by_direction.items()):
        gbs = e.gb_per_s
        rows.append([esc(d), (e.count, str(e.count)), (e.mb, f"{e.mb:.3f}"),
                     (e.time_us, f"{e.time_us:.1f}"), (gbs or 0, f"{gbs:.2f}" if gbs is not None else "-"),
                     (e.pageable_count, str(e.pageable_count))])
    if not rows:
        return "<h4>Copies</h4><p class=\"note\">No memory copies in the analysis window.</p>"
    ov = c.overlap_pct
    note = (f"<p class=\"note\">{c.pct_of_gpu_time:.1f}% of GPU busy time; "
            f"overlap with kernels {'-' if ov is None else f'{ov:.1f}%'}; exposed "
            f"{c.exposed_pct_of_step:.2f}% of step time.</p>")
    return "<h4>Copies</h4>" + _table([("direction", "t"), ("count", "n"), ("MB", "n"), ("time us", "n"),
                                       ("GB/s", "n"), ("pageable", "n")], rows, sortable=True, raw=True) + note


def _syncs(r: TraceReport) -> str:
    s = r.sync
    rows = [[esc(g.op), esc(g.inner_op or "-"), esc(g.frame or "-"), esc(", ".join(g.calls)),
             (g.count, str(g.count)), (g.per_step, f"{g.per_step:.1f}"),
             (g.blocked_ms, f"{g.blocked_ms:.3f}"), (g.gpu_idle_ms, f"{g.gpu_idle_ms:.3f}")]
            for g in s.by_cause]
    if not s.recorded:
        why = esc(sync_rate(r).capitalize())
        return f"<h4>Synchronizations</h4><p class=\"note\">{why}: this trace cannot show them.</p>"
    if not rows:
        return "<h4>Synchronizations</h4><p class=\"note\">No host-GPU synchronization in the analysis window.</p>"
    return "<h4>Synchronizations</h4>" + _table(
        [("op", "t"), ("inner op", "t"), ("user frame", "t"), ("CUDA calls", "t"), ("count", "n"),
         ("per step", "n"), ("host blocked ms", "n"), ("GPU idle caused ms", "n")], rows, sortable=True, raw=True)


def _communication(r: TraceReport) -> str:
    if not r.communication.present:
        return ""
    rows = [[esc(k), esc(v if isinstance(v, str) else num(v) if isinstance(v, (int, float)) else v)]
            for k, v in msgspec.structs.asdict(r.communication).items()]
    return "<h4>Communication</h4>" + _table([("figure", "t"), ("value", "n")], rows, raw=True)


def _cuda_api(r: TraceReport) -> str:
    out = []
    for items, title in ((r.cuda_api.slow, "Slow CUDA API calls"), (r.cuda_api.contention, "CUDA API lock contention")):
        if items:
            out.append(f"<h4>{title}</h4>" + _dicts_table([_api_row(r, x) for x in items]))
    return "\n".join(out)


def _api_row(r: TraceReport, item: SlowCall | ApiContention) -> dict:
    """A CUDA API record with its times as a person reads them: ms from the trace's start, durations in us."""
    out = {}
    for k, v in msgspec.structs.asdict(item).items():
        if k == "t_us" and isinstance(v, (int, float)):
            out["at (ms from the trace's start)"] = round(rel_ms(r, v), 3)
        elif k.endswith("_us"):
            out[f"{k[:-3].replace('_', ' ')} (us)"] = v
        else:
            out[k.replace("_", " ")] = v
    return out


def _dicts_table(items: list[dict]) -> str:
    """A table of flat dicts: one column per key of the first dict."""
    cols = [k for k, v in items[0].items() if not isinstance(v, (dict, list))]
    rows = []
    for it in items:
        row = []
        for k in cols:
            v = it.get(k)
            row.append((v, num(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else esc(v))
        rows.append(row)
    kinds = [("n" if isinstance(items[0][k], (int, float)) and not isinstance(items[0][k], bool) else "t")
             for k in cols]
    return _table(list(zip(cols, kinds)), rows, sortable=True, raw=True)


def nvml_summary(nvml: NvmlSeries | None) -> list[tuple[str, str, str, str, str]]:
    """(device, series, min, mean, max) per NVML series, plus throttled share (shared with Markdown); the samples
    are the run's first GPU's (run_logs/telemetry.py nvml_plot_series)."""
    if not nvml:
        return []
    out = []
    for values, title in ((nvml.gpu_util, "GPU utilization %"), (nvml.power_w, "power W"),
                          (nvml.sm_clock_mhz, "SM clock MHz")):
        vals = [float(v) for v in values if v is not None]
        if vals:
            out.append(("0", title, num(min(vals)), num(sum(vals) / len(vals)), num(max(vals))))
    thr = nvml.throttled
    if thr:
        out.append(("0", "throttled samples", "", f"{100 * sum(bool(x) for x in thr) / len(thr):.1f}%", ""))
    return out


def _nvml_summary(nvml: NvmlSeries | None) -> str:
    rows = [[esc(x) for x in row] for row in nvml_summary(nvml)]
    if not rows:
        return ""
    return "<h4>NVML samples</h4>" + _table(
        [("GPU", "t"), ("series", "t"), ("min", "n"), ("mean", "n"), ("max", "n")], rows, raw=True)


def environment_rows(p: TraceReport, r: dict) -> list[tuple[str, str]]:
    """What the trace says about its environment, then the `env` key of its report dict `r` flattened (shared with
    Markdown)."""
    t = p.trace
    rows = [("trace", t.path)]
    for d in t.devices:
        rows.append((f"device {d.id}", f"{d.name}, {d.sm_count} SMs, {d.memory_gb:.0f} GB, "
                                       f"compute capability {d.compute_capability}"))
    for value, title, cuda in ((t.cuda_runtime_version, "CUDA runtime", True),
                               (t.cuda_driver_version, "CUDA driver", True), (t.rank, "rank", False),
                               (t.world_size, "world size", False), (t.with_stack, "Python stacks recorded", False),
                               (t.record_shapes, "shapes recorded", False)):
        if value is not None:
            rows.append((title, version_text("cuda", value) if cuda else plain_value(value)))
    rows.append(("gpucheckup", str(r.get("gpucheckup_version", __version__))))
    rows += _flatten(r.get("env") or {})
    return rows


def _flatten(d, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            kind = k if k in ("cudnn", "nccl") else ("cuda" if k in ("cuda_runtime", "cuda_driver") else "")
            out += (_flatten(v, f"{prefix}{k}.") if isinstance(v, dict)
                    else [(f"{prefix}{k}", version_text(kind, v) if kind else _plain(v))])
    return out


def _plain(v) -> str:
    return plain_value(v)


def _environment(p: TraceReport, r: dict) -> str:
    rows = [[esc(k), esc(v)] for k, v in environment_rows(p, r)]
    return "<h4>Environment</h4>" + _table([("what", "t"), ("value", "t")], rows, raw=True, cls="env",
                                           last_class="k")


def _table(cols: list[tuple[str, str]], rows: list[list], sortable: bool = False, raw: bool = False,
           cls: str = "", first_class: str = "", last_class: str = "") -> str:
    """A table. Cells are HTML strings (already escaped) or (sort value, text) pairs for numbers."""
    classes = " ".join(x for x in (cls, "sortable" if sortable else "") if x)
    head = "".join(
        f'<th{" class=n" if kind == "n" else ""} data-type="{"num" if kind == "n" else "text"}">{esc(name)}</th>'
        for name, kind in cols)
    body = []
    for row in rows:
        cells = []
        for j, cell in enumerate(row):
            extra = first_class if j == 0 else (last_class if j == len(row) - 1 else "")
            if isinstance(cell, tuple):
                v, text = cell
                v = "" if v is None else repr(float(v))
                cells.append(f'<td class="n" data-v="{esc(v)}">{esc(text)}</td>')
            else:
                html_ = cell if raw else esc(cell)
                cells.append(f'<td{f" class={extra}" if extra else ""}>{html_}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="{classes}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')

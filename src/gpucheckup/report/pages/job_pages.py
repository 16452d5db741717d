"""The job's section of the HTML and Markdown reports: the ranks side by side, as the terminal prints them
(report/text/terminal_ranks.py) and from the same JSON (`ranks`, `communication`, `verdict` of checkup/ranks.job_dict).

The section: the job's verdict and reason, its findings (straggler, slow link), the per-rank table
(step, compute, transfer, wait, exposed wait, idle, lateness, % of communication hidden behind
compute), more than terminal_ranks.MAX_ROWS ranks as the distribution of each column with the
outlier ranks named, the collectives matched across ranks with their bus bandwidth, and the link.
Every figure is the JSON's value at two decimals (one for percentages); every text from a trace
is escaped by the page's own escaping (report/html.esc, report/markdown.md).
"""

from __future__ import annotations

from gpucheckup.document import Job, job_part, rank_table
from gpucheckup.report.pages.html import _finding, _table, esc
from gpucheckup.report.pages.markdown import md, table
from gpucheckup.report.text.lines import severity_cost
from gpucheckup.report.text.terminal_ranks import MAX_ROWS, outlier_text, rank_times

RANK_HEADERS = ["rank", "verdict", "step ms", "compute ms", "transfer ms", "wait ms", "exposed wait ms", "idle ms",
                "late ms", "comm hidden"]
DIST_HEADERS = ["per step", "min", "median", "p90", "max", "outlier ranks"]
COLL_HEADERS = ["collective", "MiB", "group", "calls", "transfer ms", "wait ms", "busbw GB/s"]


def _f(x, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def rank_rows(job: Job) -> tuple[list[str], list[list[str]]]:
    """The per-rank table, or with more than MAX_ROWS ranks the distribution of each column and its outliers."""
    table = rank_table(job.ranks.table)
    if len(table) <= MAX_ROWS:
        return RANK_HEADERS, [[str(r.rank), str(r.verdict or "-")] + [_f(x) for x in rank_times(r)]
                              + [_f(r.comm_overlap_pct, 1) + ("%" if r.comm_overlap_pct is not None else "")]
                              for r in table]
    return DIST_HEADERS, [[d.figure.replace("_ms", " ms")] + [_f(x) for x in (d.min, d.median, d.p90, d.max)]
                          + [outlier_text(d.outliers)] for d in job.ranks.distribution]


def collective_rows(job: Job) -> list[list[str]]:
    """The collectives matched across ranks: size, calls, transfer and wait per step, bus bandwidth."""
    return [[c.name, f"{c.bytes / 2**20:.1f}", str(c.group_size), str(c.count), _f(c.transfer_ms), _f(c.wait_ms),
             _f(c.busbw_gb_s)] for c in job.communication.collectives]


def link_line(job: Job) -> str:
    """The job's byte-weighted bus bandwidth against the link."""
    comm = job.communication
    bw = f"{comm.busbw_gb_s:.2f} GB/s" if comm.busbw_gb_s is not None else "-"
    link = (f"{comm.link_gb_s:.1f} GB/s ({comm.link_from})" if comm.link_gb_s is not None
            else "unknown (no topology in the run directory and no gpucheckup commbench)")
    pct = (f", {100 * comm.busbw_gb_s / comm.link_gb_s:.1f}% of the link"
           if comm.busbw_gb_s is not None and comm.link_gb_s else "")
    return f"bus bandwidth {bw} (byte-weighted over the matched calls){pct}; link {link}"


def straggler_line(job: Job) -> str:
    """Who the others wait for, how late and why; or that no rank is."""
    r = job.ranks
    if r.straggler is None:
        return (f"no straggler: no rank causes most of the others' waiting ({r.matched_calls} collective calls "
                f"matched over {r.steps} steps)")
    cause = r.cause or "no single cause"
    return (f"straggler: rank {r.straggler}, {_f(r.late_ms_per_step)} ms late per step, cause {cause}; "
            f"the others wait {_f(r.waited_ms_per_step)} ms per step")


def html_section(d: dict) -> str:
    """The job's section of the HTML page (`d`: checkup/ranks.job_dict)."""
    job, v = job_part(d)
    out = ['<section class="report" id="job">', "<h2>The job: ranks side by side</h2>",
           f'<div class="verdict v-{esc(v.primary)}"><span class="badge">'
           f'{esc(v.primary.upper().replace("_", "-"))}</span><p>{esc(v.reason)}</p>'
           f'<p class="kpis">{esc(straggler_line(job))}</p></div>']
    if v.findings:
        out += ["<h3>Findings</h3>", *(_finding(f) for f in v.findings)]
    heads, rows = rank_rows(job)
    out.append(f"<h3>Ranks ({len(job.ranks.table)}; per step)</h3>")
    out.append(_table([(h, "t" if i == 0 or h in ("verdict", "outlier ranks") else "n") for i, h in enumerate(heads)],
                      [[esc(c) for c in row] for row in rows], raw=True))
    if job.communication.collectives:
        out.append("<h3>Collectives (matched across ranks; per step)</h3>")
        out.append(_table([(h, "t" if i == 0 else "n") for i, h in enumerate(COLL_HEADERS)],
                          [[esc(c) for c in row] for row in collective_rows(job)], raw=True))
    out.append(f'<p class="meta">{esc(link_line(job))}</p>')
    if job.ranks.notes:
        out.append("<ul>" + "".join(f'<li class="note">{esc(n)}</li>' for n in job.ranks.notes) + "</ul>")
    out.append("</section>")
    return "\n".join(out)


def markdown_section(d: dict) -> str:
    """The job's section of the Markdown document (`d`: checkup/ranks.job_dict)."""
    job, v = job_part(d)
    out = ["## The job: ranks side by side\n",
           f"**Verdict: {md(v.primary.upper().replace('_', '-'))}**: {md(v.reason)}  \n{md(straggler_line(job))}\n"]
    for f in v.findings:
        out.append(f"### {md(f.title)} ({md(severity_cost(f))})\n")
        lines = [f"- {md(e)}" for e in f.evidence]
        lines += [f"- fix: {md(x.action)}" for x in f.fix]
        lines.append(f"- rule: {md(f.rule)}")
        out.append("\n".join(lines) + "\n")
    heads, rows = rank_rows(job)
    out.append(f"### Ranks ({len(job.ranks.table)}; per step)\n")
    numeric = range(2, len(heads)) if heads is RANK_HEADERS else range(1, len(heads) - 1)
    out.append(table(heads, rows, right=set(numeric)))
    if job.communication.collectives:
        out.append("### Collectives (matched across ranks; per step)\n")
        out.append(table(COLL_HEADERS, collective_rows(job), right=set(range(1, len(COLL_HEADERS)))))
    out.append(md(link_line(job)) + "\n")
    for n in job.ranks.notes or []:
        out.append(f"- {md(n)}")
    return "\n".join(out) + "\n"

"""The one emitter: prints a check-up (a trace, a folder of ranks, a run directory, the demo's cases) and
writes the JSON, HTML, Markdown and annotated-trace files that the output options ask for."""

from __future__ import annotations

from pathlib import Path

import sys

import msgspec
from rich.console import Console
from rich.markup import escape

from gpucheckup.checkup.assemble import document
from gpucheckup.atomic import write_atomic
from gpucheckup.errors import EXIT_NOT_WRITTEN, say
from gpucheckup.checkup.pipeline import Checkups, rank_summary
from gpucheckup.report import json_doc
# the terminal report (rich's tables), html, markdown, perfetto and cpu pages: imported when asked (not by --quiet)
from gpucheckup.safe_text import safe

STDOUT = Path("-")  # `--json -`: the JSON goes to standard output (and the terminal report to stderr: cli/__init__)


class Output(msgspec.Struct):
    """What the output options ask for (output_options in parser.py); None: not asked."""

    quiet: bool = False
    brief: bool = False
    json: Path | None = None
    html: Path | None = None
    markdown: Path | None = None
    perfetto: Path | None = None

    @classmethod
    def of(cls, args) -> Output:
        """The output options of parsed arguments (a command without one of them leaves it off)."""
        return cls(**{k: getattr(args, k, None) or (False if k in ("quiet", "brief") else None)
                      for k in ("quiet", "brief", "json", "html", "markdown", "perfetto")})


def emit(result: Checkups, out: Output, console: Console, cases: list[str] | None = None) -> int:
    """Print the check-up and write what `out` asks for; the exit status: 0, or EXIT_NOT_WRITTEN when a file
    asked for could not be written (one line says which and why). `cases`: the demo's case names, one per
    check-up (they label the check-ups instead of ranks, and key the JSON)."""
    checkups = result.checkups
    if cases:
        labels, slugs, title = [f"demo case: {c}" for c in cases], list(cases), "Bundled cases"
    else:
        rows = rank_summary(checkups)
        labels = [f"rank {r['rank']}: {Path(r['path']).name}" for r in rows]
        slugs, title = [f"rank{r['rank']}" for r in rows], "Ranks"
    if not out.quiet:
        _print(result, console, cases, out.brief)
    if out.json:
        data = json_doc.document(document(result, cases))
        if out.json == STDOUT:
            sys.stdout.buffer.write(data + b"\n")
            sys.stdout.flush()
        else:
            write_atomic(out.json, data)
            console.print(f"JSON written to {safe(out.json)}", style="dim", markup=False)
    if checkups:
        job = None
        if result.job and (out.html or out.markdown):
            from gpucheckup.checkup.ranks import job_dict

            job = job_dict(result.job, rank_summary(checkups), checkups)
        _write_files(list(zip(labels, slugs, checkups)), out, console, title, job)
        return 0
    if result.cpu:
        job = None
        if result.job and (out.html or out.markdown):  # a CPU-only job of several ranks: its verdict first
            from gpucheckup.checkup.ranks import job_dict

            job = job_dict(result.job, [], result.checkups)
        return _write_cpu_files(result, out, console, job)
    if result.run:
        if out.html:  # the run-level report: findings, whole-run figures, step times, NVML
            from gpucheckup.report.pages import html

            write_atomic(out.html, html.render_run_only(result.run.report).encode())
            console.print(f"HTML report written to {safe(out.html)} (open {out.html.resolve().as_uri()})", markup=False,
                          soft_wrap=True)
        if out.markdown:  # the same run-level report as tables
            from gpucheckup.report.pages import markdown

            write_atomic(out.markdown, markdown.render_run_only(result.run.report).encode())
            console.print(f"Markdown report written to {safe(out.markdown)}", style="dim", markup=False, soft_wrap=True)
        if out.perfetto:
            say(f"gpucheckup: not written: --perfetto {out.perfetto}: {result.run.no_timeline} (the annotated trace "
                "adds tracks to a GPU timeline; the JSON, the HTML, the Markdown and the terminal report hold the "
                "run-level check-up)")
            return EXIT_NOT_WRITTEN
    return 0


def _write_cpu_files(result: Checkups, out: Output, console: Console, job: dict | None = None) -> int:
    """Write the HTML and Markdown of CPU-side check-ups (`job`: the ranks' job section, checkup/ranks.job_dict,
    first); the annotated trace is not made for them (one line)."""
    from gpucheckup.report.pages import cpu_pages
    from gpucheckup.report.pages.job_pages import html_section, markdown_section

    pages = [(f"rank {c.rank}: {Path(c.path).name}" if c.rank is not None else Path(c.path).name, c.report)
             for c in result.cpu]
    if out.html:
        write_atomic(out.html, cpu_pages.render_html(pages, head=html_section(job) if job else "").encode())
        console.print(f"HTML report written to {safe(out.html)}", markup=False, soft_wrap=True)
    if out.markdown:
        write_atomic(out.markdown, cpu_pages.render_markdown(pages, head=markdown_section(job) if job else "").encode())
        console.print(f"Markdown report written to {safe(out.markdown)}", style="dim", markup=False, soft_wrap=True)
    if out.perfetto:
        say(f"gpucheckup: not written: --perfetto {out.perfetto}: the annotated trace adds GPU tracks and this "
            "trace has no device activity; open the trace itself in ui.perfetto.dev")
        return EXIT_NOT_WRITTEN
    return 0


def _print(result: Checkups, console: Console, cases: list[str] | None, brief: bool = False) -> None:
    """The terminal report: a summary table when there are several check-ups, each check-up, the whole run."""
    from gpucheckup.report.text import terminal, terminal_run

    if cases:
        _print_cases(result, console, cases, brief)
    else:
        if result.job:
            from gpucheckup.checkup.ranks import job_dict
            from gpucheckup.report.text import terminal_ranks

            terminal_ranks.render_job(job_dict(result.job, rank_summary(result.checkups), result.checkups), console)
        elif len(result.checkups) > 1:
            terminal.render_ranks(rank_summary(result.checkups), console)
        for c in result.checkups:
            terminal.render(c.report, console, brief)
        if result.cpu:
            from gpucheckup.report.text import terminal_cpu

            for c in result.cpu:
                terminal_cpu.render(c.report, console)
    if result.run and not (brief and result.checkups):
        if result.checkups or result.cpu:
            terminal_run.render_run((result.checkups or result.cpu)[0].report, console)
        else:
            terminal_run.render_run_only(result.run.report, console)


def _print_cases(result: Checkups, console: Console, cases: list[str], brief: bool = False) -> None:
    from rich.table import Table

    from gpucheckup.report.text import terminal

    t = Table(title="Bundled cases", title_justify="left")
    for col in ("case", "verdict", "GPU busy", "step"):
        t.add_column(col)
    for case, c in zip(cases, result.checkups):
        t.add_row(case, c.diagnosis.primary, f"{c.facts.busy_pct:.1f}%", f"{c.facts.step_ms:.2f} ms")
    console.print(t)
    for case, c in zip(cases, result.checkups):
        console.rule(f"demo case: {case}")
        terminal.render(c.report, console, brief)


def _write_files(items: list, out: Output, console: Console, title: str, job: dict | None = None) -> None:
    """Write the HTML, Markdown and annotated-trace files; items are (label, slug, check-up); `job`: the ranks'
    job section (checkup/ranks.job_dict)."""
    pages = [(label, c.report) for label, _, c in items]
    if out.html:
        from gpucheckup.report.pages import html

        from gpucheckup.report.pages.job_pages import html_section

        write_atomic(out.html, html.render(pages, title, html_section(job) if job else "").encode())
        console.print(f"HTML report written to {safe(out.html)} (open {out.html.resolve().as_uri()})", markup=False,
                      soft_wrap=True)
    if out.markdown:
        from gpucheckup.report.pages import markdown

        from gpucheckup.report.pages.job_pages import markdown_section

        write_atomic(out.markdown, markdown.render(pages, title, markdown_section(job) if job else "").encode())
        console.print(f"Markdown report written to {safe(out.markdown)}", style="dim", markup=False, soft_wrap=True)
    if out.perfetto:
        from gpucheckup.checkup import perfetto

        for _, slug, c in items:
            path = out.perfetto if len(items) == 1 else with_slug(out.perfetto, slug)
            with Console(stderr=True).status(f"writing the annotated trace {escape(safe(path))}"):
                perfetto.write(c.analysis, c.diagnosis, path)
            console.print(f"annotated trace written to {safe(path)} (open it in ui.perfetto.dev)", style="dim",
                          markup=False, soft_wrap=True)


def with_slug(path: Path, slug: str) -> Path:
    """`out.json.gz` + `rank1` -> `out.rank1.json.gz`."""
    name = path.name
    suffix = next((x for x in (".json.gz", ".json", ".gz") if name.endswith(x)), path.suffix)
    stem = name[: len(name) - len(suffix)] if suffix else name
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in slug)
    return path.with_name(f"{stem}.{safe}{suffix}")

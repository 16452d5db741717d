"""The `gpucheckup` command line."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

import msgspec
from rich.console import Console
from rich.markup import escape

from gpucheckup import __version__
from gpucheckup.analysis.mfu import MfuInputs
from gpucheckup.atomic import write_atomic
from gpucheckup.checkup import Checkup, check_path, rank_summary
from gpucheckup.errors import CheckupError, say
from gpucheckup.report import html, markdown, perfetto, terminal

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70
DEMO_CASES = ("input_bound", "launch_bound", "moe_seed", "compute_bound")
DEMO_HTML = Path("gpucheckup-demo.html")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpucheckup",
        description="A performance check-up for PyTorch GPU training: what bounds the job, the evidence, "
                    "and what to fix first.",
    )
    p.add_argument("--version", action="version", version=f"gpucheckup {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser("analyze", help="check up a PyTorch profiler trace (file or folder of per-rank traces) "
                                       "or a gpucheckup run directory")
    a.add_argument("path", type=Path, help="trace .json / .json.gz, a folder of them, or a run directory")
    _output_options(a)
    _mfu_options(a)
    a.set_defaults(func=cmd_analyze)

    c = sub.add_parser("ceilings", help="measure this GPU's matmul rates and copy bandwidths (needs torch and CUDA)")
    c.add_argument("--out", type=Path, metavar="FILE",
                   help="where to store them (default: ~/.cache/gpucheckup/ceilings-<gpu>.json, found by analyze)")
    c.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    c.add_argument("--quick", action="store_true", help="smaller problems and fewer repeats (a rough figure)")
    c.set_defaults(func=cmd_ceilings)

    n = sub.add_parser("ncu-cmd", help="print the Nsight Compute command line that profiles a check-up's top kernels")
    n.add_argument("path", type=Path, help="a trace (or folder) or a gpucheckup JSON report")
    n.add_argument("--top", type=int, default=5, help="how many top kernels (default 5)")
    n.add_argument("--skip-steps", type=int, default=10,
                   help="training steps to let pass before profiling (default 10: past warm-up)")
    n.add_argument("--command", default="python train.py", help="the training command (default: python train.py)")
    n.set_defaults(func=cmd_ncu_cmd)

    d = sub.add_parser("demo", help="check up real H200 traces bundled with gpucheckup (offline, no GPU)")
    d.add_argument("--case", choices=DEMO_CASES, action="append",
                   help="only this bundled case (repeatable); default: all of them")
    _output_options(d)
    d.set_defaults(func=cmd_demo)

    from gpucheckup.capture import attach, launcher

    launcher.add_parser(sub)
    attach.add_parser(sub)
    _whatif_parsers(sub)
    return p


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the check-up as JSON")
    p.add_argument("--quiet", action="store_true", help="no terminal report (with --json)")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write a self-contained HTML report with plots")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown tables")
    p.add_argument("--perfetto", type=Path, metavar="FILE",
                   help="also write the trace with gpucheckup's tracks added, for ui.perfetto.dev (.json or .json.gz;"
                        " one file per trace, named FILE.<rank or case>.json[.gz], when there are several)")


def _mfu_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("MFU (docs/mfu.md)")
    g.add_argument("--flops-per-step", type=float, metavar="F", help="model FLOPs of one training step on one GPU")
    g.add_argument("--params", type=float, metavar="N", help="parameter count, for 6*N*T FLOPs per step")
    g.add_argument("--tokens-per-step", type=float, metavar="T", help="tokens per step per GPU (with --params)")
    g.add_argument("--layers", type=int, metavar="L", help="layers, for the attention term 12*L*D*S*T")
    g.add_argument("--d-model", type=int, metavar="D", help="model width (heads x head dim), for the attention term")
    g.add_argument("--seq-len", type=int, metavar="S", help="sequence length, for the attention term")
    g.add_argument("--samples-per-step", type=float, metavar="B", help="samples per step per GPU, for samples/s")
    g.add_argument("--gpu", metavar="NAME", help="the GPU (peak-table id like H100-SXM, or a device name), "
                                                 "when the trace does not say or says wrong")
    g.add_argument("--dtype", choices=("bf16", "fp16", "tf32", "fp32", "fp8"),
                   help="measure MFU against this dtype's peak (default: the dtype of most GEMM time)")
    g.add_argument("--peak-tflops", type=float, metavar="P", help="use this peak instead of the datasheet's")
    g.add_argument("--ceilings", type=Path, metavar="FILE", help="measured ceilings (from gpucheckup ceilings)")
    g.add_argument("--unprofiled-step-ms", type=float, metavar="MS",
                   help="the job's step time without the profiler (e.g. from its logs): corrects the trace's "
                        "host-side shares and MFU for profiler overhead (run directories use their steps.csv)")
    g.add_argument("--ncu", type=Path, metavar="FILE.csv",
                   help="Nsight Compute --csv output (long or --page raw) for the kernels' bounds")


def mfu_inputs(args) -> MfuInputs:
    """The MFU options as MfuInputs; CheckupError for impossible values."""
    from gpucheckup.hardware import ceilings

    for name in ("flops_per_step", "params", "tokens_per_step", "samples_per_step", "peak_tflops", "layers",
                 "d_model", "seq_len", "unprofiled_step_ms"):
        v = getattr(args, name, None)
        if v is not None and not v > 0:
            raise CheckupError(f"--{name.replace('_', '-')} must be a positive number, got {v}")
    if args.params is not None and args.tokens_per_step is None:
        raise CheckupError("--params needs --tokens-per-step (FLOPs per step = 6*N*T)")
    c = ceilings.load(args.ceilings) if args.ceilings else None
    return MfuInputs(flops_per_step=args.flops_per_step, params=args.params, tokens_per_step=args.tokens_per_step,
                     layers=args.layers, seq_len=args.seq_len, d_model=args.d_model,
                     samples_per_step=args.samples_per_step, gpu=args.gpu, dtype=args.dtype,
                     peak_tflops=args.peak_tflops, ceilings=c, ceilings_path=str(args.ceilings) if c else None,
                     unprofiled_step_ms=args.unprofiled_step_ms,
                     unprofiled_from="--unprofiled-step-ms" if args.unprofiled_step_ms else "")


def _emit(results: list[Checkup], args, console: Console) -> None:
    """Print and write what the options ask for."""
    if not args.quiet:
        if len(results) > 1:
            terminal.render_ranks(rank_summary(results), console)
        for c in results:
            terminal.render(c.report, console)
    if args.json:
        payload = results[0].report if len(results) == 1 else {
            "ranks": rank_summary(results), "reports": [c.report for c in results]}
        write_atomic(args.json, msgspec.json.format(msgspec.json.encode(payload), indent=2))
        console.print(f"JSON written to {args.json}", style="dim", markup=False)
    rows = rank_summary(results)
    _write_reports([(f"rank {r['rank']}: {Path(r['path']).name}", c) for r, c in zip(rows, results)], args, console,
                   "Ranks", [f"rank{r['rank']}" for r in rows])


def _write_reports(items: list[tuple[str, Checkup]], args, console: Console, title: str, slugs: list[str]) -> None:
    """Write the HTML, Markdown and annotated-trace files that the options ask for."""
    pages = [(label, c.report) for label, c in items]
    if getattr(args, "html", None):
        write_atomic(args.html, html.render(pages, title).encode())
        console.print(f"HTML report written to {args.html} (open {args.html.resolve().as_uri()})", markup=False,
                      soft_wrap=True)
    if getattr(args, "markdown", None):
        write_atomic(args.markdown, markdown.render(pages, title).encode())
        console.print(f"Markdown report written to {args.markdown}", style="dim", markup=False,
                      soft_wrap=True)
    if getattr(args, "perfetto", None):
        for (_, c), slug in zip(items, slugs):
            out = args.perfetto if len(items) == 1 else _with_slug(args.perfetto, slug)
            with Console(stderr=True).status(f"writing the annotated trace {escape(str(out))}"):
                write_atomic(out, perfetto.render(c.analysis, c.report, out.name))
            console.print(f"annotated trace written to {out} (open it in ui.perfetto.dev)", style="dim",
                          markup=False, soft_wrap=True)


def _with_slug(path: Path, slug: str) -> Path:
    """`out.json.gz` + `rank1` -> `out.rank1.json.gz`."""
    name = path.name
    suffix = next((x for x in (".json.gz", ".json", ".gz") if name.endswith(x)), path.suffix)
    stem = name[: len(name) - len(suffix)] if suffix else name
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in slug)
    return path.with_name(f"{stem}.{safe}{suffix}")


def cmd_analyze(args, console: Console) -> int:
    from gpucheckup.trace.rundir import is_run_dir

    if is_run_dir(args.path):  # a gpucheckup run directory: traces plus the run-level parts
        from gpucheckup.run_checkup import check_run, emit_run

        rc = check_run(args.path, inputs=mfu_inputs(args), ncu_csv=args.ncu)
        emit_run(rc, console, quiet=args.quiet, json_path=args.json)
        if rc.checkups:
            rows = rank_summary(rc.checkups)
            _write_reports([(f"rank {r['rank']}: {Path(r['path']).name}", c) for r, c in zip(rows, rc.checkups)],
                           args, console, "Ranks", [f"rank{r['rank']}" for r in rows])
        elif any(getattr(args, k, None) for k in ("html", "markdown", "perfetto")):
            console.print(f"{rc.no_timeline}: no HTML, Markdown or annotated trace written", markup=False)
        return 0
    results = check_path(args.path, inputs=mfu_inputs(args), ncu_csv=args.ncu)
    _emit(results, args, console)
    return 0


def cmd_ceilings(args, console: Console) -> int:
    from gpucheckup.capture.ceilings import measure, print_ceilings
    from gpucheckup.hardware import ceilings

    c = measure(device=args.device, quick=args.quick, progress=lambda msg: console.print(msg, style="dim",
                                                                                        markup=False))
    path = ceilings.save(c, args.out or ceilings.default_path(c.device))
    print_ceilings(c, console)
    console.print(f"ceilings written to {path}", style="dim", markup=False)
    return 0


def cmd_ncu_cmd(args, console: Console) -> int:
    from gpucheckup.report.ncu_cmd import ncu_command, report_for

    report = report_for(args.path)
    sys.stdout.write(ncu_command(report, top=args.top, skip_steps=args.skip_steps, command=args.command) + "\n")
    return 0


def demo_trace(case: str) -> Path:
    """Path of a bundled demo trace."""
    return Path(str(resources.files("gpucheckup") / "data" / "demo" / case / "trace.json.gz"))


def cmd_demo(args, console: Console) -> int:
    cases = args.case or list(DEMO_CASES)
    console.print("gpucheckup demo: real PyTorch profiler traces captured on an NVIDIA H200, checked up offline.",
                  style="bold", markup=False)
    results = []
    for case in cases:
        results += check_path(demo_trace(case))
    if not args.quiet:
        from rich.table import Table

        t = Table(title="Bundled cases", title_justify="left")
        for col in ("case", "verdict", "GPU busy", "median step"):
            t.add_column(col)
        for case, c in zip(cases, results):
            t.add_row(case, c.diagnosis.primary, f"{c.report['gpu']['busy_pct']:.1f}%",
                      f"{c.report['steps']['median_ms']:.2f} ms")
        console.print(t)
        for case, c in zip(cases, results):
            console.rule(f"demo case: {case}")
            terminal.render(c.report, console)
    if args.json:
        payload = {case: c.report for case, c in zip(cases, results)}
        write_atomic(args.json, msgspec.json.format(msgspec.json.encode(payload), indent=2))
        console.print(f"JSON written to {args.json}", style="dim", markup=False)
    args.html = args.html or DEMO_HTML
    _write_reports([(f"demo case: {case}", c) for case, c in zip(cases, results)], args, console,
                   "Bundled cases", list(cases))
    return 0


# ---- ab, compare, examples (what-if, issue 10) --------------------------------------------------

def _whatif_parsers(sub) -> None:
    """The `ab`, `compare` and `examples` subcommands."""
    from gpucheckup.capture import ab

    ab.add_parser(sub)
    sub.choices["ab"].set_defaults(func=cmd_ab)
    c = sub.add_parser("compare", help="compare two check-ups (run directories or JSON reports): every figure, "
                                       "its change, whether beyond noise")
    c.add_argument("a", type=Path, help="the baseline: a run directory, a trace, or a check-up JSON")
    c.add_argument("b", type=Path, help="the candidate, the same kinds")
    c.add_argument("--markdown", type=Path, metavar="FILE", help="also write the comparison as Markdown")
    c.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON")
    c.add_argument("--changed", action="store_true", help="print only the figures that changed beyond noise")
    c.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit with status 1 when B's step time is more than PCT percent above A's (a CI gate)")
    c.set_defaults(func=cmd_compare)
    e = sub.add_parser("examples", help="list the runnable pathology scripts and the flags that apply each fix")
    e.set_defaults(func=cmd_examples)


def cmd_ab(args, console: Console) -> int:
    from gpucheckup.analysis import ab_stats
    from gpucheckup.capture import ab
    from gpucheckup.report import ab_text

    a, b = ab.sides_from(args.cmd, args.vary)
    if args.samples_per_step is not None and not args.samples_per_step > 0:
        raise CheckupError(f"--samples-per-step must be a positive number, got {args.samples_per_step}")
    total = 2 * args.rounds
    done = [0]

    def progress(side, r):
        done[0] += 1
        console.print(f"[{done[0]}/{total}] {side.label} round {r} done", style="dim", markup=False)

    a_rounds, b_rounds = ab.run_ab(a, b, rounds=args.rounds, warmup=args.warmup, measure=args.measure,
                                   out=args.out, progress=progress)
    result = ab_stats.compare(a_rounds, b_rounds, a.label, b.label, args.samples_per_step)
    ab_text.render(result, console)
    if args.json:
        write_atomic(args.json, msgspec.json.format(msgspec.json.encode(result.to_dict()), indent=2))
        console.print(f"JSON written to {args.json}", style="dim", markup=False)
    return 0


def _report_of(path: Path) -> dict:
    """The check-up report of a run directory, a trace, or a check-up JSON file (first rank's when several)."""
    from gpucheckup.trace.rundir import is_run_dir

    if is_run_dir(path):
        from gpucheckup.run_checkup import check_run, reports

        return reports(check_run(path))[0]
    if path.is_file() and path.name.endswith(".json"):
        try:
            doc = msgspec.json.decode(path.read_bytes())
        except msgspec.DecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("reports"), list) and doc["reports"]:
            return doc["reports"][0]
        if isinstance(doc, dict) and "verdict" in doc:
            return doc
    if not path.exists():
        raise CheckupError(f"{path}: no such file or directory")
    return check_path(path)[0].report


def cmd_compare(args, console: Console) -> int:
    from gpucheckup.analysis.compare import compare
    from gpucheckup.report import compare_text

    if args.fail_if_slower is not None and not args.fail_if_slower >= 0:
        raise CheckupError(f"--fail-if-slower must be 0 or more, got {args.fail_if_slower}")
    c = compare(_report_of(args.a), _report_of(args.b))
    compare_text.render(c, console, only_changed=args.changed)
    if args.markdown:
        write_atomic(args.markdown, compare_text.markdown(c, str(args.a), str(args.b)).encode())
        console.print(f"Markdown written to {args.markdown}", style="dim", markup=False)
    if args.json:
        write_atomic(args.json, msgspec.json.format(msgspec.json.encode(c.to_dict()), indent=2))
        console.print(f"JSON written to {args.json}", style="dim", markup=False)
    if args.fail_if_slower is not None and c.step_change_pct is not None and c.step_change_pct > args.fail_if_slower:
        say(f"gpucheckup compare: B is {c.step_change_pct:.1f}% slower than A (limit {args.fail_if_slower:g}%)")
        return 1
    return 0


def cmd_examples(args, console: Console) -> int:
    from gpucheckup.examples import catalogue

    for ex in catalogue.examples():
        console.print(f"python -m gpucheckup.examples.{ex.name}", style="bold", markup=False)
        console.print(f"  {ex.summary}", markup=False, soft_wrap=True)
        for flag, what in ex.flags:
            console.print(f"    {flag:24s} {what}", markup=False, soft_wrap=True)
    console.print("Measure a fix: gpucheckup ab -- python -m gpucheckup.examples.launch -- "
                  "python -m gpucheckup.examples.launch --fused", style="dim", markup=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(highlight=False)
    try:
        return args.func(args, console)
    except CheckupError as e:
        say(f"gpucheckup: error: {e}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        say("gpucheckup: interrupted")
        return 130
    except Exception as e:  # noqa: BLE001 - one line, not a traceback, unless --debug
        if args.debug:
            raise
        say(f"gpucheckup: internal error: {type(e).__name__}: {e} (run with --debug for details)")
        return EXIT_INTERNAL



if __name__ == "__main__":
    sys.exit(main())

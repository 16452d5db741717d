"""What each command does, from its parsed options: capture when asked, then the pipeline, then the emitter.

Every function is `cmd_<name>(args, console) -> exit code`. The modules they use are imported when
they run, so that parsing (and `gpucheckup --help`) imports the standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpucheckup.errors import EXIT_FAILED_CONDITION, CheckupError, say
from gpucheckup.safe_text import safe

DEMO_HTML = Path("gpucheckup-demo.html")
AB_WARMUP, AB_MEASURE = 20, 100  # ab's defaults (parser.py), which `try` and `run --try` share
MFU_NUMBERS = ("flops_per_step", "params", "tokens_per_step", "samples_per_step", "peak_tflops", "layers", "d_model",
               "seq_len", "unprofiled_step_ms")


def mfu_inputs(args):
    """The MFU options as MfuInputs; CheckupError for impossible values."""
    from gpucheckup.analysis.flops.mfu import MfuInputs
    from gpucheckup.hardware import ceilings

    for name in MFU_NUMBERS:
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


def cmd_analyze(args, console) -> int:
    from gpucheckup.cli.emit import Output, emit
    from gpucheckup.checkup.pipeline import check

    if args.path.suffix == ".csv":  # a `gpucheckup monitor --record` file: NVML telemetry only
        from gpucheckup.checkup.monitor import analyze_recording

        return analyze_recording(args.path, console, quiet=args.quiet, json_path=args.json)
    if args.max_json_gib is not None:
        if not args.max_json_gib > 0:
            raise CheckupError(f"--max-json-gib must be a positive number, got {args.max_json_gib}")
        from gpucheckup.trace import chunks

        chunks.set_json_limit(int(args.max_json_gib * (1 << 30)))
    jobs = 1 if args.perfetto else args.jobs  # the annotated trace needs each analysis in this process
    if jobs is not None and jobs < 1:
        raise CheckupError(f"--jobs must be 1 or more, got {jobs}")
    verdicts, tests = _conditions(args)  # checked before the work
    result = check(args.path, mfu_inputs(args), args.ncu, jobs=jobs)
    rc = emit(result, Output.of(args), console)
    return gate(result, verdicts, tests, getattr(args, "allow_missing", False)) or rc




def _conditions(args) -> tuple[set[str], list]:
    """The --fail-on and --fail-if conditions, parsed (the API module only when there are some)."""
    if not (args.fail_on or args.fail_if):
        return set(), []
    from gpucheckup import api

    return api.conditions(args.fail_on, args.fail_if)


def gate(result, verdicts: set[str], tests: list, allow_missing: bool = False) -> int:
    """EXIT_FAILED_CONDITION and one line per condition that fired, else 0. A --fail-if figure the check-up has
    no value for fails the gate too (a gate that cannot be tested has not passed), one line naming it, unless
    `allow_missing` (--allow-missing), which lets it pass with a line saying so."""
    if not (verdicts or tests):
        return 0
    from gpucheckup import api

    up = api.checkup_of(result)
    if up is None:
        return 0
    missing = api.unmeasured(up, tests)
    for name in missing:
        if allow_missing:
            say(f"gpucheckup: --fail-if {name}: not measured in this check-up; passed under --allow-missing")
        else:
            say(f"gpucheckup: failed: --fail-if {name}: not measured in this check-up ({api.FIGURES[name]}), so "
                "the gate cannot pass; --allow-missing lets a missing figure pass")
    fired = api.failed(up, verdicts, tests)
    for line in fired:
        say(f"gpucheckup: failed: {line}")
    return EXIT_FAILED_CONDITION if fired or (missing and not allow_missing) else 0


def cmd_demo(args, console) -> int:
    from gpucheckup.cli.emit import Output, emit
    from gpucheckup.checkup.pipeline import Checkups, check

    cases = args.case or list(args.cases)
    console.print("gpucheckup demo: real PyTorch profiler traces captured on an NVIDIA H200, checked up offline.",
                  style="bold", markup=False)
    result = Checkups(Path("demo"), [c for case in cases for c in check(demo_trace(case)).checkups])
    out = Output.of(args)
    out.html = out.html or DEMO_HTML
    return emit(result, out, console, cases)


def demo_trace(case: str) -> Path:
    """Path of a bundled demo trace."""
    from importlib import resources

    return Path(str(resources.files("gpucheckup") / "data" / "demo" / case / "trace.json.gz"))


def cmd_run(args, console) -> int:
    """Run the job (capture/launcher.py), check its run directory up, and pass its exit status through."""
    from gpucheckup.capture import launcher
    from gpucheckup.capture.options import RunOptions

    opts = RunOptions(out=args.out, name=args.name, skip=args.skip, steps=args.steps,
                               record_shapes=args.record_shapes, with_stack=args.with_stack, flops=args.flops,
                               window_start=args.window_start, window=args.window, nvml_hz=args.nvml_hz,
                               no_nvml=args.no_nvml, light=args.light,
                      light_syncs=args.light_syncs, counter_steps=args.counter_steps, sample_hz=args.sample_hz,
                      max_steps=args.max_steps)
    inputs = mfu_inputs(args)  # every option is checked before the job starts
    job = launcher.run_job(list(args.cmd), opts)
    if job.started:
        _report_run(job.run_dir, args, inputs, console)
    if job.started and job.returncode == 0 and args.try_fixes:
        _run_try_after(args, job.run_dir, console)
    return launcher.pass_through(job.returncode)


def _run_try_after(args, run_dir: Path, console) -> None:
    """`run --try`: the check-up's configuration fixes tried on the same command (checkup/trial.py), predicted
    beside measured; a failure here is one line and never changes the job's exit status."""
    from gpucheckup.atomic import NotWritten
    from gpucheckup.checkup.trial import BaseFailed, run_try, side_effects

    console.print(side_effects(False), style="bold", markup=False, soft_wrap=True)  # the run was the check-up
    try:
        doc = run_try(list(args.cmd), None, args.try_rounds, *_try_counts(None, None, args.max_steps),
                      args.max_steps, args.out, checkup_dir=run_dir, progress=_try_progress(console))
    except (BaseFailed, CheckupError, NotWritten) as e:  # the job's status still passes through
        say(f"gpucheckup run --try: no trial: {e}")
        return
    _emit_try(doc, console, None, None, None)


def _report_run(run_dir: Path, args, inputs, console) -> None:
    """Print (and write) the check-up of a finished job's run; a failure here never changes the exit status."""
    from gpucheckup.atomic import NotWritten
    from gpucheckup.cli.emit import Output

    out = Output.of(args)
    out.quiet = args.no_report
    if out.quiet and not (out.json or out.html or out.markdown or out.perfetto):
        return
    try:
        from gpucheckup.cli.emit import emit
        from gpucheckup.checkup.pipeline import check_run

        emit(check_run(run_dir, inputs, args.ncu), out, console)
        console.print(f"run directory: {run_dir}", style="dim", markup=False, highlight=False, soft_wrap=True)
    except CheckupError as e:
        say(f"gpucheckup: no check-up of {run_dir}: {e}")
    except NotWritten as e:  # the job's status still passes through
        say(f"gpucheckup: error: {e}")
    except Exception as e:  # noqa: BLE001 - a closed stdout, a bug in a report: the job's status still passes
        if args.debug:
            raise
        say(f"gpucheckup: no check-up of {run_dir}: internal error {type(e).__name__}: {e}")


def cmd_attach(args, console) -> int:
    """Capture the running job (capture/attach.py), then check up what was captured."""
    from gpucheckup.capture import attach
    from gpucheckup.capture.options import AttachOptions
    from gpucheckup.cli.emit import Output, emit
    from gpucheckup.checkup.pipeline import attach_run_dir, check, check_run

    opts = AttachOptions(pid=args.pid, duration=args.duration, steps=args.steps, mode=args.mode, out=args.out,
                                rate=args.rate, native=args.native, timeout=args.timeout)
    inputs = mfu_inputs(args)
    got = attach.capture(opts, note=lambda msg: console.print(msg, style="dim", markup=False, highlight=False,
                                                             soft_wrap=True))
    if got.trace is not None:
        console.print(f"trace written: {got.trace}", markup=False, highlight=False, soft_wrap=True)
        run_dir = attach_run_dir(got.trace)
        result = None
        if run_dir is not None:  # the job's run directory: its step log gives the unprofiled step, as `run` uses
            try:
                result = check_run(run_dir, inputs, args.ncu, trace=got.trace)
            except CheckupError as e:
                say(f"gpucheckup attach: the trace alone is checked up: the job's run directory could not be read ({e})")
        if result is None:
            result = check(got.trace, inputs, args.ncu)  # a CPU-only trace gets its CPU-side check-up
    else:
        result = check(got.run_dir, inputs, args.ncu)
    rc = emit(result, Output.of(args), console)
    if got.run_dir is not None:
        console.print(f"run directory: {got.run_dir}", style="dim", markup=False, highlight=False, soft_wrap=True)
    return rc


def cmd_ceilings(args, console) -> int:
    from gpucheckup.capture.ceilings import measure, print_ceilings
    from gpucheckup.hardware import ceilings

    c = measure(device=args.device, quick=args.quick, progress=lambda msg: console.print(msg, style="dim",
                                                                                        markup=False))
    path = ceilings.save(c, args.out or ceilings.default_path(c.device))
    print_ceilings(c, console)
    console.print(f"ceilings written to {safe(path)}", style="dim", markup=False)
    return 0


def cmd_ncu_cmd(args, console) -> int:
    from gpucheckup.checkup.ncu_cmd import ncu_command, saved_report

    part = saved_report(args.path)
    if part is None:
        from gpucheckup.checkup.assemble import document
        from gpucheckup.checkup.pipeline import check

        doc = document(check(args.path))
        if not doc.checkups:
            raise CheckupError(f"{args.path}: no kernels to profile: the trace has no device activity")
        part = doc.checkups[0]
    sys.stdout.write(ncu_command(part, top=args.top, skip_steps=args.skip_steps, command=args.command) + "\n")
    return 0


def cmd_dataloader(args, console) -> int:
    from gpucheckup.checkup import loader as loader_checkup

    return loader_checkup.run(args.factory, loader_checkup.parse_workers(args.workers), args.pin_memory,
                              args.batches, args.checkup, args.json, console)


def cmd_monitor(args, console) -> int:
    from gpucheckup.checkup import monitor as monitor_live

    for name in ("duration", "step_ms"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise CheckupError(f"--{name.replace('_', '-')} must be above 0, got {v}")
    monitor_live.run(args.pid, args.interval, args.record, args.duration, args.step_ms, console)
    return 0


def cmd_commbench(args, console) -> int:
    from gpucheckup.capture import commbench

    nproc = args.nproc
    if nproc is None:
        try:
            import torch
            nproc = torch.cuda.device_count() or 2
        except ImportError:
            raise CheckupError("commbench needs torch (pip install torch)") from None
    if nproc < 2:
        raise CheckupError(f"--nproc {nproc}: a collective needs at least 2 ranks")
    rc = commbench.launch(nproc, args.out, args.max_mib)
    if rc != 0:
        raise CheckupError(f"commbench ranks exited with code {rc} (their output is above)")
    return 0


def cmd_scaling(args, console) -> int:
    """Scaling efficiency of an N-GPU run against a 1-GPU run (checkup/scaling.py), printed; JSON when asked."""
    from dataclasses import asdict

    from gpucheckup.atomic import write_atomic
    from gpucheckup.checkup.scaling import scaling_of
    from gpucheckup.document import measured
    from gpucheckup.report import json_doc
    from gpucheckup.report.text import scaling_text

    res = scaling_of(args.run_1, args.run_n)
    scaling_text.render(res.scaling, res.step_from, res.both_envs, console)
    if args.json:
        write_atomic(args.json, json_doc.document(measured("scaling", asdict(res.scaling))))
    return 0


def _try_counts(warmup: int | None, measure: int | None, max_steps: int | None) -> tuple[int, int]:
    """Warm-up and measured steps: as given; else ab's defaults, with --max-steps a quarter of it as warm-up (when
    less) and every step after it measured (the first step has no time)."""
    if warmup is None:
        warmup = min(AB_WARMUP, max_steps // 4) if max_steps else AB_WARMUP
    if measure is None:
        measure = max(max_steps - max(warmup, 1), 1) if max_steps else AB_MEASURE
    return warmup, measure


def _try_progress(console):
    """A progress line per finished process."""
    def progress(side, r):
        what = "the base check-up" if r == 0 else f"{side.label} round {r}"
        console.print(f"{what} done", style="dim", markup=False, soft_wrap=True)
    return progress


def _emit_try(doc, console, json_path, markdown_path, html_path) -> None:
    """Print a try document and write the files asked for."""
    from gpucheckup.atomic import write_atomic
    from gpucheckup.checkup.trial import side_effects
    from gpucheckup.report import json_doc
    from gpucheckup.report.text import try_text

    try_text.render(doc, console)
    if json_path:
        write_atomic(json_path, json_doc.document(doc))
        console.print(f"JSON written to {safe(json_path)}", style="dim", markup=False)
    if markdown_path or html_path:
        from gpucheckup.report.pages import try_pages

        for path, text in ((markdown_path, try_pages.markdown), (html_path, try_pages.html)):
            if path:
                write_atomic(path, text(doc, side_effects(doc.checkup is not None)).encode())
                console.print(f"written to {safe(path)}", style="dim", markup=False)


def cmd_try(args, console) -> int:
    """Try fixes (checkup/trial.py); the command's own exit status when it fails as it is."""
    from gpucheckup.capture import launcher
    from gpucheckup.checkup.trial import BaseFailed, run_try, side_effects

    console.print(side_effects(not args.no_predict), style="bold", markup=False, soft_wrap=True)
    if not args.max_steps:
        console.print("No --max-steps: each run lasts as long as the job does.", style="dim", markup=False)
    try:
        doc = run_try(list(args.cmd), args.fixes, args.rounds, *_try_counts(args.warmup, args.measure, args.max_steps),
                      args.max_steps, args.out, predict=not args.no_predict,
                      progress=_try_progress(console))
    except BaseFailed as e:
        say(f"gpucheckup try: {e}")
        return launcher.pass_through(e.rc)
    _emit_try(doc, console, args.json, args.markdown, args.html)
    return 0


def cmd_ab(args, console) -> int:
    from gpucheckup.report import json_doc
    from gpucheckup.checkup import ab
    from gpucheckup.atomic import write_atomic
    from gpucheckup.report.text import ab_text

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
    result = ab.compare(a, b, a_rounds, b_rounds, args.samples_per_step, args.warmup, args.measure)
    ab_text.render(result, console)
    if args.json:
        write_atomic(args.json, json_doc.document(ab.document(result)))
        console.print(f"JSON written to {safe(args.json)}", style="dim", markup=False)
    return 0


def _document_of(path: Path):
    """The check-up document of a run directory or a trace (checked up here), or a check-up JSON document read back:
    both sides of `compare` through the same types (document.py)."""
    from gpucheckup.checkup.assemble import document, is_document, read_document
    from gpucheckup.checkup.pipeline import check

    if path.is_file() and path.name.endswith(".json") and is_document(path):
        return read_document(path)
    return document(check(path))


def cmd_compare(args, console) -> int:
    from gpucheckup.document import measured
    from gpucheckup.report import json_doc
    from gpucheckup.analysis.comparison.compare import compare_documents
    from gpucheckup.atomic import write_atomic
    from gpucheckup.report.text import compare_text

    if args.fail_if_slower is not None and not args.fail_if_slower >= 0:
        raise CheckupError(f"--fail-if-slower must be 0 or more, got {args.fail_if_slower}")
    c = compare_documents(_document_of(args.a), _document_of(args.b))
    compare_text.render(c, console, everything=args.all)
    if args.markdown:
        write_atomic(args.markdown, compare_text.markdown(c, str(args.a), str(args.b), args.all).encode())
        console.print(f"Markdown written to {safe(args.markdown)}", style="dim", markup=False)
    if args.json:
        write_atomic(args.json, json_doc.document(measured("compare", {"a": str(args.a), "b": str(args.b),
                                                                        **c.to_dict()})))
        console.print(f"JSON written to {safe(args.json)}", style="dim", markup=False)
    if args.fail_if_slower is None:
        return 0
    if c.step_change_pct is None:  # a gate that cannot be tested has not passed (as analyze's --fail-if)
        if args.allow_missing:
            say("gpucheckup compare: --fail-if-slower: no step time to compare; passed under --allow-missing")
            return 0
        say("gpucheckup compare: failed: --fail-if-slower: A or B has no step time, so the gate cannot pass; "
            "--allow-missing lets it pass")
        return EXIT_FAILED_CONDITION
    if c.step_change_pct > args.fail_if_slower:
        say(f"gpucheckup compare: B is {c.step_change_pct:.1f}% slower than A (limit {args.fail_if_slower:g}%)")
        return EXIT_FAILED_CONDITION
    return 0


def cmd_examples(args, console) -> int:
    from gpucheckup.examples import catalogue

    for ex in catalogue.examples():
        console.print(f"python -m gpucheckup.examples.{ex.name}", style="bold", markup=False)
        console.print(f"  {ex.summary}", markup=False, soft_wrap=True)
        for flag, what in ex.flags:
            console.print(f"    {flag:24s} {what}", markup=False, soft_wrap=True)
    console.print("Measure a fix: gpucheckup ab -- python -m gpucheckup.examples.launch -- "
                  "python -m gpucheckup.examples.launch --fused", style="dim", markup=False)
    return 0


def cmd_schema(args, console) -> int:
    """Print the check-up document's JSON Schema (the one shipped in the package, generated from its types)."""
    import sys
    from importlib import resources

    sys.stdout.write((resources.files("gpucheckup") / "data" / "schema.json").read_text())
    return 0

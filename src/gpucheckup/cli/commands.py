"""What each command does, from its parsed options: capture when asked, then the pipeline, then the emitter.

Every function is `cmd_<name>(args, console) -> exit code`. The modules they use are imported when
they run, so that parsing (and `gpucheckup --help`) imports the standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpucheckup.errors import CheckupError, say

DEMO_HTML = Path("gpucheckup-demo.html")
MFU_NUMBERS = ("flops_per_step", "params", "tokens_per_step", "samples_per_step", "peak_tflops", "layers", "d_model",
               "seq_len", "unprofiled_step_ms")


def mfu_inputs(args):
    """The MFU options as MfuInputs; CheckupError for impossible values."""
    from gpucheckup.analysis.mfu import MfuInputs
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
    from gpucheckup.pipeline import check

    if args.path.suffix == ".csv":  # a `gpucheckup monitor --record` file: NVML telemetry only
        from gpucheckup.monitor_live import analyze_recording

        return analyze_recording(args.path, console, quiet=args.quiet, json_path=args.json)
    jobs = 1 if args.perfetto else None  # the annotated trace needs each analysis in this process
    emit(check(args.path, mfu_inputs(args), args.ncu, jobs=jobs), Output.of(args), console)
    return 0


def cmd_demo(args, console) -> int:
    from gpucheckup.cli.emit import Output, emit
    from gpucheckup.pipeline import Checkups, check

    cases = args.case or list(args.cases)
    console.print("gpucheckup demo: real PyTorch profiler traces captured on an NVIDIA H200, checked up offline.",
                  style="bold", markup=False)
    result = Checkups(Path("demo"), [c for case in cases for c in check(demo_trace(case)).checkups])
    out = Output.of(args)
    out.html = out.html or DEMO_HTML
    emit(result, out, console, cases)
    return 0


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
                               no_nvml=args.no_nvml)
    inputs = mfu_inputs(args)  # every option is checked before the job starts
    job = launcher.run_job(list(args.cmd), opts)
    if job.started:
        _report_run(job.run_dir, args, inputs, console)
    return launcher.pass_through(job.returncode)


def _report_run(run_dir: Path, args, inputs, console) -> None:
    """Print (and write) the check-up of a finished job's run; a failure here never changes the exit status."""
    from gpucheckup.cli.emit import Output

    out = Output.of(args)
    out.quiet = args.no_report
    if out.quiet and not (out.json or out.html or out.markdown or out.perfetto):
        return
    try:
        from gpucheckup.cli.emit import emit
        from gpucheckup.pipeline import check_run

        emit(check_run(run_dir, inputs, args.ncu), out, console)
        console.print(f"run directory: {run_dir}", style="dim", markup=False, highlight=False, soft_wrap=True)
    except CheckupError as e:
        say(f"gpucheckup: no check-up of {run_dir}: {e}")
    except Exception as e:  # noqa: BLE001 - a closed stdout, a bug in a report: the job's status still passes
        if args.debug:
            raise
        say(f"gpucheckup: no check-up of {run_dir}: internal error {type(e).__name__}: {e}")


def cmd_attach(args, console) -> int:
    """Capture the running job (capture/attach.py), then check up what was captured."""
    from gpucheckup.capture import attach
    from gpucheckup.capture.options import AttachOptions
    from gpucheckup.cli.emit import Output, emit
    from gpucheckup.pipeline import check

    opts = AttachOptions(pid=args.pid, duration=args.duration, steps=args.steps, mode=args.mode, out=args.out,
                                rate=args.rate, native=args.native, timeout=args.timeout)
    inputs = mfu_inputs(args)
    got = attach.capture(opts, note=lambda msg: console.print(msg, style="dim", markup=False, highlight=False,
                                                             soft_wrap=True))
    if got.trace is not None:
        console.print(f"trace written: {got.trace}", markup=False, highlight=False, soft_wrap=True)
        try:
            result = check(got.trace, inputs, args.ncu)
        except CheckupError as e:
            if "CPU-only" not in str(e):
                raise
            console.print("no GPU timeline: the trace holds CPU activity only (no kernels, copies or memsets); "
                          "open it in Perfetto (ui.perfetto.dev) to look at the host side", markup=False)
            return 0
    else:
        result = check(got.run_dir, inputs, args.ncu)
    emit(result, Output.of(args), console)
    if got.run_dir is not None:
        console.print(f"run directory: {got.run_dir}", style="dim", markup=False, highlight=False, soft_wrap=True)
    return 0


def cmd_ceilings(args, console) -> int:
    from gpucheckup.capture.ceilings import measure, print_ceilings
    from gpucheckup.hardware import ceilings

    c = measure(device=args.device, quick=args.quick, progress=lambda msg: console.print(msg, style="dim",
                                                                                        markup=False))
    path = ceilings.save(c, args.out or ceilings.default_path(c.device))
    print_ceilings(c, console)
    console.print(f"ceilings written to {path}", style="dim", markup=False)
    return 0


def cmd_ncu_cmd(args, console) -> int:
    from gpucheckup.report.ncu_cmd import ncu_command, saved_report

    report = saved_report(args.path)
    if report is None:
        from gpucheckup.pipeline import check

        report = check(args.path).reports()[0]
    sys.stdout.write(ncu_command(report, top=args.top, skip_steps=args.skip_steps, command=args.command) + "\n")
    return 0


def cmd_dataloader(args, console) -> int:
    from gpucheckup import loader_checkup

    return loader_checkup.run(args.factory, loader_checkup.parse_workers(args.workers), args.pin_memory,
                              args.batches, args.checkup, args.json, console)


def cmd_monitor(args, console) -> int:
    from gpucheckup import monitor_live

    for name in ("duration", "step_ms"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise CheckupError(f"--{name.replace('_', '-')} must be above 0, got {v}")
    monitor_live.run(args.pid, args.interval, args.record, args.duration, args.step_ms, console)
    return 0

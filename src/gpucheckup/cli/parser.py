"""Every command's options, in one place: the shared option groups and one function per command.

Adding a command: write `cmd_<name>(args, console) -> int` in commands.py, a `_<name>(sub)` here
that declares its options (with the shared groups it needs) and names the function, and add it
to COMMANDS. Standard library only at import (`gpucheckup --help` must be fast): the command
functions import what they need when they run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpucheckup import __version__
from gpucheckup.capture import options as capture
from gpucheckup.capture.agent.settings import DURATION_MAX_STEPS, SETTINGS
from gpucheckup.cli import commands

EXIT_CODES = """exit codes (every command; `run` passes the job's own through):
  0   done
  2   bad input or usage (one line on stderr says what and where)
  3   a gate fired: --fail-on, --fail-if, compare --fail-if-slower, or a gate's figure is missing
      (one line each; --allow-missing lets a missing figure pass)
  4   an output file could not be written (one line names the file and why)
  70  an internal error (a bug: please report it with --debug's traceback)
  1   the reader of standard output went away (`| head`): quietly
  130 interrupted (Ctrl-C)"""
DEMO_CASES = ("input_bound", "launch_bound", "moe_seed", "compute_bound")
AB_ROUNDS = 3  # ab's defaults: the baselines protocol (docs/metrics.md, A/B)
AB_WARMUP, AB_MEASURE = commands.AB_WARMUP, commands.AB_MEASURE


class Parser(argparse.ArgumentParser):
    """argparse's parser, cutting off the `-- CMD` of the commands that take one after their options
    (split_command) before parsing, and setting it as `cmd`."""

    def parse_known_args(self, args=None, namespace=None):
        head, cmd = split_command(sys.argv[1:] if args is None else list(args))
        ns, extras = super().parse_known_args(head, namespace)
        if cmd is not None:
            ns.cmd = cmd
        return ns, extras


def build_parser() -> argparse.ArgumentParser:
    """The `gpucheckup` parser with every command."""
    p = Parser(
        prog="gpucheckup",
        description="A performance check-up for PyTorch GPU training: what bounds the job, the evidence, "
                    "and what to fix first.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"gpucheckup {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)  # options every command takes, before or after its name
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks instead of one-line errors")
    for add in COMMANDS:
        add(sub, common)
    return p


# ---- shared option groups --------------------------------------------------------------------------

def output_options(p: argparse.ArgumentParser, quiet: bool = True) -> None:
    """Where the check-up goes: the terminal, JSON, HTML, Markdown, an annotated trace."""
    g = p.add_argument_group("output")
    g.add_argument("--json", type=Path, metavar="FILE",
                   help="also write the check-up as JSON (- : to standard output, the terminal report to stderr)")
    if quiet:
        g.add_argument("--quiet", action="store_true", help="no terminal report (with --json)")
    g.add_argument("--brief", action="store_true",
                   help="a short terminal report: the verdict, the three biggest findings and the top fixes")
    g.add_argument("--html", type=Path, metavar="FILE", help="also write a self-contained HTML report with plots")
    g.add_argument("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown tables")
    g.add_argument("--perfetto", type=Path, metavar="FILE",
                   help="also write the trace with gpucheckup's tracks added, for ui.perfetto.dev (.json or .json.gz;"
                        " one file per trace, named FILE.<rank or case>.json[.gz], when there are several)")


def mfu_options(p: argparse.ArgumentParser) -> None:
    """What MFU is measured from: the model's FLOPs, the GPU's peak, the unprofiled step time, ncu's bounds."""
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


def capture_options(p: argparse.ArgumentParser, what: str) -> argparse._ArgumentGroup:
    """Where a capture's run directory goes; the group, for the command's own capture options."""
    g = p.add_argument_group("capture")
    g.add_argument("--out", type=Path, default=capture.DEFAULT_OUT, help=f"parent folder of the run directory{what}")
    return g


# ---- commands ----------------------------------------------------------------------------------------

def _analyze(sub, common) -> None:
    a = sub.add_parser("analyze", parents=[common],
                       help="check up a PyTorch profiler trace (file or folder of per-rank traces) "
                            "or a gpucheckup run directory")
    a.add_argument("path", type=Path, help="trace .json / .json.gz, a folder of them, or a run directory")
    a.add_argument("--jobs", type=int, metavar="N",
                   help="worker processes for a folder of traces over 8 MB (default: one per core); --jobs 1 keeps "
                        "every rank in this process (the cross-rank analysis runs either way)")
    a.add_argument("--max-json-gib", type=float, metavar="G",
                   help="read traces holding up to G GiB of JSON once decompressed (default: this machine's memory, "
                        "at least 8; a larger stream is refused as a compressed bomb, as is a gzip file holding over "
                        "100x its size unless this is given)")
    output_options(a)
    g = a.add_argument_group("CI (exit 3 when one fires; README: exit codes)")
    g.add_argument("--fail-on", action="append", metavar="VERDICT[,..]",
                   help="exit 3 when the verdict is one of these (e.g. launch_bound,input_bound; docs/api.md)")
    g.add_argument("--fail-if", action="append", metavar="FIGURE<N",
                   help="exit 3 when a figure passes a bound, e.g. 'mfu_pct<30', 'busy_pct<80', 'step_ms>120', "
                        "'gap_launch_pct>=20' (<, <=, >, >=; repeatable; figures: docs/api.md); a figure the "
                        "check-up has no value for fails the gate (exit 3, one line naming it)")
    g.add_argument("--allow-missing", action="store_true",
                   help="let a --fail-if figure the check-up has no value for pass (a line says so) instead of "
                        "failing the gate")
    mfu_options(a)
    a.set_defaults(func=commands.cmd_analyze)


def _demo(sub, common) -> None:
    d = sub.add_parser("demo", parents=[common],
                       help="check up real H200 traces bundled with gpucheckup (offline, no GPU)")
    d.add_argument("--case", choices=DEMO_CASES, action="append",
                   help="only this bundled case (repeatable); default: all of them")
    output_options(d)
    d.set_defaults(func=commands.cmd_demo, cases=DEMO_CASES)


def _run(sub, common) -> None:
    p = sub.add_parser(
        "run", parents=[common],
        help="run a training job with no code change and check it up (gpucheckup run -- python train.py)",
        description="Run CMD with the gpucheckup agent injected: step times for the whole run, a profiled "
                    "window after warm-up, NVML telemetry, the environment; then print the check-up. "
                    "Exit code and signals pass through.")
    g = capture_options(p, "")
    g.add_argument("--name", help="run name (default: the script's name)")
    g.add_argument("--skip", type=int, help=f"steps before the profiled window (default {SETTINGS['skip'][1]})")
    g.add_argument("--steps", type=int, help=f"steps to profile (default {SETTINGS['steps'][1]})")
    g.add_argument("--record-shapes", action="store_true", help="record operator input shapes")
    g.add_argument("--with-stack", action="store_true", help="record Python stacks (large traces)")
    g.add_argument("--flops", action="store_true", help="count one step's FLOPs with FlopCounterMode (flops.json)")
    g.add_argument("--window-start", type=float, metavar="S",
                   help=f"no optimizer step after S seconds: profile a time window (default "
                        f"{SETTINGS['window_start_s'][1]:g})")
    g.add_argument("--window", type=float, metavar="S",
                   help=f"length of that time window (default {SETTINGS['window_s'][1]:g})")
    g.add_argument("--nvml-hz", type=float, default=capture.DEFAULT_NVML_HZ,
                   help=f"NVML sampling rate, above 0 and at most {capture.NVML_HZ_MAX:g} "
                        f"(default {capture.DEFAULT_NVML_HZ:g})")
    g.add_argument("--no-nvml", action="store_true", help="do not sample NVML")
    g.add_argument("--light", action="store_true",
                   help="light window: CUDA activities and the cheap ranges (ProfilerStep, DataLoader, optimizer) "
                        "only, host causes from py-spy stacks sampled outside the job (docs/capture.md)")
    g.add_argument("--light-syncs", action="store_true",
                   help="with --light: also record CUPTI's host synchronization records, so syncs are counted; they "
                        "cost every kernel launch: a fifth to a half of a launch-bound job's step (docs/validation.md 6e, 6g)")
    g.add_argument("--counter-steps", type=int, metavar="N",
                   help="with --light: steps sampled by the GPU's activity counters before the window's kernel records "
                        "(CUPTI PM sampling, cupti-python 13.3+: GPU busy and launches per step at no measurable cost; "
                        "default 20, 0: none; docs/capture.md)")
    g.add_argument("--max-steps", type=int, metavar="N",
                   help="end the job cleanly after N optimizer steps (the agent raises SystemExit(0) in its step "
                        "hook; the check-up reads what ran)")
    g.add_argument("--sample-hz", type=float, default=capture.DEFAULT_SAMPLE_HZ, metavar="HZ",
                   help=f"py-spy sampling rate of the light window (default {capture.DEFAULT_SAMPLE_HZ:g})")
    output_options(p, quiet=False)
    p.add_argument("--no-report", action="store_true",
                   help="do not print the check-up at the end (nor make one, unless a file option asks)")
    p.add_argument("--try", dest="try_fixes", action="store_true",
                   help="after the check-up, try the configuration fixes it proposes that the agent can apply, as "
                        "`gpucheckup try` does (runs the command again, 1 + fixes times per round, with its side "
                        "effects), and print predicted beside measured")
    p.add_argument("--try-rounds", type=int, default=AB_ROUNDS, metavar="N",
                   help=f"with --try: rounds (default {AB_ROUNDS})")
    mfu_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the job's command line")
    p.set_defaults(func=commands.cmd_run)


def _attach(sub, common) -> None:
    p = sub.add_parser("attach", parents=[common],
                       help="check up a running job (gpucheckup attach --pid N --duration 20)",
                       description="Check up a running job without restarting it: through its gpucheckup agent, "
                                   "by injecting the agent (Python 3.14+), or out of process with py-spy and NVML.")
    p.add_argument("--pid", type=int, required=True, help="the job's process id (or gpucheckup run's)")
    g = capture_options(p, " (py-spy and inject modes)")
    how_long = g.add_mutually_exclusive_group()
    how_long.add_argument("--duration", type=float, metavar="S",
                          help=f"seconds to capture (py-spy default {capture.DEFAULT_DURATION_S:g}; with the agent a "
                               f"window in seconds stops after at most {DURATION_MAX_STEPS} steps)")
    how_long.add_argument("--steps", type=int, metavar="K",
                          help=f"optimizer steps to profile, 1 to {capture.STEPS_MAX} (needs the agent; its default "
                               f"{capture.DEFAULT_STEPS})")
    g.add_argument("--mode", choices=capture.ATTACH_MODES, default="auto",
                   help="how to get in (default: the first that works, in that order)")
    g.add_argument("--rate", type=float, default=capture.DEFAULT_RATE,
                   help=f"py-spy dumps per second, 0.1 to {capture.RATE_MAX:g} (default {capture.DEFAULT_RATE:g})")
    g.add_argument("--native", action="store_true",
                   help="py-spy: native frames too (pauses the job for each dump, which biases NVML toward idle)")
    g.add_argument("--timeout", type=float, default=capture.DEFAULT_TIMEOUT_S,
                   help=f"give up after this many seconds (default {capture.DEFAULT_TIMEOUT_S:g})")
    output_options(p)
    mfu_options(p)
    p.set_defaults(func=commands.cmd_attach)


def _ceilings(sub, common) -> None:
    c = sub.add_parser("ceilings", parents=[common],
                       help="measure this GPU's matmul rates and copy bandwidths (needs torch and CUDA)")
    c.add_argument("--out", type=Path, metavar="FILE",
                   help="where to store them (default: ~/.cache/gpucheckup/ceilings-<gpu>.json, found by analyze)")
    c.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    c.add_argument("--quick", action="store_true", help="smaller problems and fewer repeats (a rough figure)")
    c.set_defaults(func=commands.cmd_ceilings)


def _ncu_cmd(sub, common) -> None:
    n = sub.add_parser("ncu-cmd", parents=[common],
                       help="print the Nsight Compute command line that profiles a check-up's top kernels")
    n.add_argument("path", type=Path, help="a trace (or folder) or a gpucheckup JSON report")
    n.add_argument("--top", type=int, default=5, help="how many top kernels (default 5)")
    n.add_argument("--skip-steps", type=int, default=10,
                   help="training steps to let pass before profiling (default 10: past warm-up)")
    n.add_argument("--command", default="python train.py", help="the training command (default: python train.py)")
    n.set_defaults(func=commands.cmd_ncu_cmd)


def _dataloader(sub, common) -> None:
    dl = sub.add_parser("dataloader", parents=[common],
                        help="benchmark your DataLoader alone per num_workers / pin_memory, against the cores you "
                             "really have, whether it waits on IO or CPU, and the step time")
    dl.add_argument("factory", metavar="MODULE:FACTORY",
                    help="a function make_loader(num_workers: int, pin_memory: bool) returning your DataLoader "
                         "(MODULE: dotted name or path/to/file.py)")
    dl.add_argument("--workers", default="0,2,4,8,16", help="num_workers values (default 0,2,4,8,16)")
    dl.add_argument("--pin-memory", choices=("false", "true", "both"), default="false",
                    help="pin_memory settings to measure (default false)")
    dl.add_argument("--batches", type=int, default=50, help="timed batches per setting, after warm-up (default 50)")
    dl.add_argument("--checkup", type=Path, metavar="PATH",
                    help="a check-up JSON, run directory or trace: compare with the GPU's step time")
    dl.add_argument("--json", type=Path, metavar="FILE", help="also write the figures and advice as JSON")
    dl.set_defaults(func=commands.cmd_dataloader)


def _monitor(sub, common) -> None:
    mo = sub.add_parser("monitor", parents=[common],
                        help="live GPU and process view that names heartbeats and throttling (like nvidia-smi dmon);"
                             " --record writes CSV that analyze reads")
    mo.add_argument("--pid", type=int, help="the job's process: its GPUs, its CPU and its children's (loader workers)")
    mo.add_argument("--interval", type=float, default=0.2, help="seconds between samples (default 0.2)")
    mo.add_argument("--record", type=Path, metavar="FILE.csv",
                    help="also write the NVML samples as CSV (nvml.csv's columns): gpucheckup analyze FILE.csv")
    mo.add_argument("--duration", type=float, metavar="S",
                    help="stop after S seconds (default: Ctrl-C or the process's exit)")
    mo.add_argument("--step-ms", type=float, metavar="MS", help="the job's step time, to match the heartbeat against")
    mo.set_defaults(func=commands.cmd_monitor)


def _commbench(sub, common) -> None:
    b = sub.add_parser("commbench", parents=[common],
                       help="measure collective bus bandwidth (all-reduce, all-gather, reduce-scatter, all-to-all) "
                            "through torch.distributed: NCCL on GPUs, gloo on CPUs")
    b.add_argument("--nproc", type=int, default=None, help="ranks to start (default: the GPUs here, or 2 on a CPU)")
    b.add_argument("--out", type=Path, metavar="FILE",
                   help="where to store it (default: ~/.cache/gpucheckup/commbench-<gpu>-x<n>.json, found by analyze)")
    b.add_argument("--max-mib", type=float, metavar="MIB", help="largest message (default 1024 on GPUs, 64 on CPUs)")
    b.set_defaults(func=commands.cmd_commbench)


def _scaling(sub, common) -> None:
    s = sub.add_parser("scaling", parents=[common],
                       help="scaling efficiency of an N-GPU run against a 1-GPU run of the same job (same batch per "
                            "GPU), and where the extra step time goes")
    s.add_argument("run_1", type=Path, help="run directory of the job on 1 GPU")
    s.add_argument("run_n", type=Path, help="run directory of the job on N GPUs")
    s.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    s.set_defaults(func=commands.cmd_scaling)


def _ab(sub, common) -> None:
    p = sub.add_parser(
        "ab", parents=[common],
        help="measure two configurations: separate processes, interleaved A B A B, warm-up dropped",
        description="Run CMD_A and CMD_B (or one command with --vary ENV=v1,v2) alternately in their own "
                    "processes, with the agent recording step times (no profiler); drop the warm-up steps, "
                    "compare the median step times and say whether B is faster or slower (the 95% interval of "
                    "the change lies below or above 0) or no different (it holds 0).")
    p.add_argument("--rounds", type=int, default=AB_ROUNDS,
                   help=f"processes per side (default {AB_ROUNDS})")
    p.add_argument("--warmup", type=int, default=AB_WARMUP, help=f"steps dropped at the start (default {AB_WARMUP})")
    p.add_argument("--measure", type=int, default=AB_MEASURE,
                   help=f"steps measured after them (default {AB_MEASURE})")
    p.add_argument("--vary", metavar="ENV=v1,v2", help="one command, run with ENV=v1 (A) and ENV=v2 (B)")
    p.add_argument("--samples-per-step", type=float, metavar="B", help="samples per step, for samples/s")
    p.add_argument("--out", type=Path, help="keep each process's run directory here (default: a temporary folder)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD_A -- CMD_B")
    p.set_defaults(func=commands.cmd_ab)


def _try(sub, common) -> None:
    p = sub.add_parser(
        "try", parents=[common],
        usage="gpucheckup try [FIX[,FIX...]] [--rounds N] [--max-steps N] [--json FILE] [options] -- CMD",
        help="apply configuration fixes with no code change and measure each against the check-up's prediction",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run CMD as it is and with each FIX applied by the injected agent, each in its own process, "
                    "base and fixes in turn for --rounds rounds, warm-up steps dropped (gpucheckup ab's protocol and "
                    "decision rule), and print per fix what was applied where, the measured saving with its 95% "
                    "interval and the saving the base run's check-up predicted. With no FIX, try every "
                    "configuration fix the check-up proposes that the agent can apply.\n\n"
                    "THIS RUNS YOUR COMMAND AGAIN, with all its side effects: once for the check-up, then "
                    "(1 + fixes) x rounds times. --max-steps ends each run cleanly after N optimizer steps.",
        epilog="fixes (FIX[,FIX...]; a+b applies both in one trial):\n"
               "  dataloader_workers[=N]  DataLoader(num_workers=N, persistent_workers=True); N by default the\n"
               "                          workers the advice names, up to the usable cores\n"
               "  persistent_workers      DataLoader(persistent_workers=True) where it has workers\n"
               "  prefetch_factor[=K]     DataLoader(prefetch_factor=K) where it has workers (default 4)\n"
               "  pin_memory              DataLoader(pin_memory=True) where CUDA is available\n"
               "  fused_optimizer         torch.optim.Adam/AdamW/SGD(fused=True) where torch accepts it\n"
               "  tf32                    torch.set_float32_matmul_precision('high'), cudnn.allow_tf32\n"
               "  cudnn_benchmark         torch.backends.cudnn.benchmark = True\n"
               "  expandable_segments     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
               "  cpu_threads[=N]         OMP_NUM_THREADS=N (default: the usable cores)\n"
               "  env:NAME=VALUE          any variable, e.g. env:NCCL_ALGO=Ring\n\n"
               "exit code: the command's own when it fails as it is; a fix that breaks the job is reported in its "
               "row (verdict failed, exit_code); else 0, or as every command (gpucheckup --help).")
    p.add_argument("fixes", nargs="?", metavar="FIX[,FIX...]", help="the fixes to try (default: the check-up's)")
    p.add_argument("--rounds", type=int, default=AB_ROUNDS, help=f"processes per side (default {AB_ROUNDS})")
    p.add_argument("--max-steps", type=int, metavar="N", help="end each run cleanly after N optimizer steps")
    p.add_argument("--warmup", type=int, metavar="W",
                   help=f"steps dropped at the start (default {AB_WARMUP}, or a quarter of --max-steps if less)")
    p.add_argument("--measure", type=int, metavar="M",
                   help=f"steps measured after them (default {AB_MEASURE}, or all the steps --max-steps leaves)")
    p.add_argument("--no-predict", action="store_true",
                   help="no base check-up (one process fewer): the named fixes are measured without a prediction")
    p.add_argument("--out", type=Path, default=capture.DEFAULT_OUT,
                   help=f"parent folder of the trial's folder of run directories (default {capture.DEFAULT_OUT})")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON (docs/schema.md)")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the result as Markdown")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the result as a self-contained HTML page")
    # `-- CMD` is cut off before parsing (split_command): argparse's REMAINDER after an optional positional would
    # swallow the options that follow FIX
    p.set_defaults(func=commands.cmd_try, cmd=[])


TAKES_COMMAND_AFTER_DASHES = {"try"}  # commands whose `-- CMD` split_command cuts off before parsing


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """For a command of TAKES_COMMAND_AFTER_DASHES: the words before the first `--` (to parse) and the command
    after it; else all words and None."""
    words = [w for w in argv if not w.startswith("-")]
    if not words or words[0] not in TAKES_COMMAND_AFTER_DASHES or "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def _compare(sub, common) -> None:
    c = sub.add_parser("compare", parents=[common],
                       help="compare two check-ups (run directories, traces or JSON reports): the figures that "
                            "changed beyond noise, grouped (--all: every figure)")
    c.add_argument("a", type=Path, help="the baseline: a run directory, a trace, or a check-up JSON")
    c.add_argument("b", type=Path, help="the candidate, the same kinds")
    c.add_argument("--markdown", type=Path, metavar="FILE", help="also write the comparison as Markdown")
    c.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON")
    c.add_argument("--all", action="store_true", help="print every figure (default: those that changed beyond noise)")
    c.add_argument("--changed", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    c.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit 3 (as analyze's gates) when B's step time is more than PCT percent above A's (a CI "
                        "gate); when either step time is missing the gate fails too, unless --allow-missing")
    c.add_argument("--allow-missing", action="store_true",
                   help="let --fail-if-slower pass (a line says so) when either check-up has no step time")
    c.set_defaults(func=commands.cmd_compare)


def _examples(sub, common) -> None:
    e = sub.add_parser("examples", parents=[common],
                       help="list the runnable pathology scripts and the flags that apply each fix")
    e.set_defaults(func=commands.cmd_examples)


def _schema(sub, common) -> None:
    s = sub.add_parser("schema", parents=[common],
                       help="print the JSON Schema of the check-up document that --json writes (docs/schema.md)")
    s.set_defaults(func=commands.cmd_schema)


COMMANDS = [_analyze, _ceilings, _ncu_cmd, _demo, _run, _attach, _dataloader, _monitor, _commbench, _scaling,
            _ab, _try, _compare, _examples, _schema]  # in the order `gpucheckup --help` lists them

"""The `gpucheckup` command line: parser.py parses every command, commands.py runs them, emit.py prints
and writes every check-up. Importing it imports the standard library only (`gpucheckup --help` is fast)."""

from __future__ import annotations

import gc
import os
import sys

from gpucheckup.cli.parser import build_parser
from gpucheckup.atomic import NotWritten
from gpucheckup.errors import (EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_NOT_WRITTEN,
                               CheckupError, say)

# Commands that open no file they leave to the interpreter's exit to flush or close, start no thread that outlives
# them, and whose only exit work is the atexit handlers: the process may end right after them (exit_now below).
EXIT_NOW_COMMANDS = {"analyze"}


def entry() -> None:
    """The `gpucheckup` command (console script and `python -m gpucheckup`): main(), then exit with its status."""
    sys.exit(main(exit_now=True))


def main(argv: list[str] | None = None, exit_now: bool = False) -> int:
    """Run one command; bad input is one line on stderr and exit 2, never a traceback (unless --debug).
    `exit_now` (the command itself, never a caller in-process): after a command of EXIT_NOW_COMMANDS, run the
    atexit handlers, flush and end the process at once (_exit_now)."""
    args = build_parser().parse_args(argv)
    rc = _run(args)
    if exit_now and args.command in EXIT_NOW_COMMANDS:
        _exit_now(rc)
    return rc


def _run(args) -> int:
    """Run the parsed command; its exit status."""
    try:
        _load_libraries()
        from rich.console import Console

        to_stderr = str(getattr(args, "json", None)) == "-"  # `--json -`: stdout holds the JSON alone
        # emoji=False: no `:name:` in a report is an emoji code (and rich's table of them, read on the first
        # string it prints, costs ~0.6% of a 1 MB check-up; docs/performance.md)
        rc = args.func(args, Console(highlight=False, emoji=False, stderr=to_stderr))
        sys.stdout.flush()  # a closed pipe shows here, not as an "Exception ignored" at exit
        return rc
    except BrokenPipeError:  # `gpucheckup ... | head`: stop quietly (the Python docs' recipe, signal module)
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except CheckupError as e:
        say(f"gpucheckup: error: {e}")
        return EXIT_BAD_INPUT
    except NotWritten as e:
        say(f"gpucheckup: error: {e}")
        return EXIT_NOT_WRITTEN
    except KeyboardInterrupt:
        say("gpucheckup: interrupted")
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - one line, not a traceback, unless --debug
        if args.debug:
            raise
        say(f"gpucheckup: internal error: {type(e).__name__}: {e} (run with --debug for details)")
        return EXIT_INTERNAL


def _exit_now(rc: int) -> None:
    """End the process with status rc after the atexit handlers and a flush of stdout and stderr, skipping the
    interpreter's teardown (freeing every module and object: ~3% of a 1 MB check-up, docs/performance.md). Only
    where this thread is the last one (else the interpreter's exit joins the others); a flush that fails (the
    reader of stdout went away) leaves the exit to the interpreter, as before; so does a profiler or tracer
    (cProfile, coverage), which writes its results after the program returns."""
    import atexit
    import threading  # imported by then (rich); not at the top, where `--help` would pay for it

    if threading.active_count() > 1 or sys.getprofile() is not None or sys.gettrace() is not None:
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(rc)


def _load_libraries() -> None:
    """Import numpy and rich with the cycle collector paused, then freeze what they made out of later
    collections (once per process): their ~100k long-lived objects were walked by every full collection
    during our own imports and the check-up, ~10% of the CPU of a 1 MB trace's check-up (docs/performance.md)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        _keep_freed_memory()
        _import_numpy_single_threaded()
        import rich.console  # noqa: F401
    finally:
        if was_on:
            if not _frozen:
                gc.freeze()
                _frozen.append(True)
            gc.enable()


_frozen: list[bool] = []  # gc.freeze() done in this process (main() runs many times in a test session)


# glibc's malloc (mallopt): blocks under MMAP_THRESHOLD come from the heap, where freed memory is kept (up to
# TRIM_THRESHOLD at its top) and the heap grows TOP_PAD at a time. By default a block over ~128 KiB (a chunk of JSON,
# its columns) is mapped and unmapped each time, so every page of the next one faults again: 15.0k -> 11.5k page
# faults of a 1 MB check-up, ~3-4% of its time on this VM. The threshold is glibc's largest (32 MiB): a large trace's
# analyses make many temporary columns of 8-32 MiB (1-4M rows), each of whose pages faulted in again when mapped
# afresh; at 16x and 32x (3.4M, 6.9M events) system CPU 1.07 -> 0.67 and 2.38 -> 1.03 s, peak RSS +12% and +1.5%
# (8 MiB before; the reader's columns grow in place, trace/columns.py). docs/performance.md.
MALLOC_OPTIONS = {-3: 32 << 20, -1: 64 << 20, -2: 8 << 20}  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD


def _keep_freed_memory() -> None:
    """Set MALLOC_OPTIONS where the C library is glibc (nothing elsewhere, nor where MALLOC_* variables set them)."""
    if _malloc_tuned or sys.platform != "linux" or any(k.startswith("MALLOC_") for k in os.environ):
        return
    _malloc_tuned.append(True)
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):
            return
        for param, value in MALLOC_OPTIONS.items():
            libc.mallopt(param, value)
    except (OSError, AttributeError):
        pass


_malloc_tuned: list[bool] = []


def _import_numpy_single_threaded() -> None:
    """Import numpy with its BLAS on one thread: no analysis multiplies matrices, and OpenBLAS starting a
    thread per core costs ~35 ms of CPU at import (bench/; docs/performance.md). The variable is read when
    the library loads and removed again, so the jobs `run` launches keep their own setting."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit writes nowhere instead of failing again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout not a file descriptor (redirected in-process)
        pass


__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())

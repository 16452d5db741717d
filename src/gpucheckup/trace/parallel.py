"""Map a function over trace files in worker processes, a few files at a time.

A folder of per-rank traces is read and analyzed on every core, and memory stays bounded: each
worker holds one trace at a time, at most `IN_FLIGHT_PER_WORKER` files per worker are handed out
ahead, and what comes back must be small (a report, not the trace's tables). Workers start from
a fresh interpreter (spawn), never a fork of a process that may hold threads, and are children of
this process (so its resource accounting covers them).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from gpucheckup.errors import CheckupError

IN_FLIGHT_PER_WORKER = 2  # files handed to each worker ahead of the results taken back
MIN_BYTES = 8 << 20  # folders smaller than this on disk are read in-process (starting workers costs ~0.3 s)


def cores() -> int:
    """The processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def idle_cores() -> float:
    """The processors this process may run on less those other work keeps busy now: the runnable tasks besides
    this one (Linux's /proc/loadavg), else the 1-minute load average."""
    try:
        with open("/proc/loadavg") as f:
            busy = int(f.read().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        try:
            busy = os.getloadavg()[0]
        except OSError:  # no load average on this platform
            busy = 0
    return cores() - busy


def worth_it(paths: list[Path], jobs: int | None = None) -> bool:
    """Whether reading these files in workers pays: several files, several cores, enough bytes."""
    if (jobs if jobs is not None else cores()) < 2 or len(paths) < 2:
        return False
    return sum(p.stat().st_size for p in paths if p.exists()) >= MIN_BYTES


def _context():
    import multiprocessing

    return multiprocessing.get_context("spawn")


def _worker_start() -> None:
    """In a new worker, before it imports numpy: its BLAS on one thread, as the command line does for itself
    (cli._import_numpy_single_threaded; set in the worker only, so nothing else inherits it)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _call(fn: Callable, path: Path, args: tuple):
    """In the worker: fn(path, *args), or the CheckupError it raised (handed back as a value)."""
    try:
        return fn(path, *args)
    except CheckupError as e:
        return e


def map_files(fn: Callable, paths: list, *args, jobs: int | None = None) -> Iterator[tuple[object, object]]:
    """(path, fn(path, *args)) for each path, in the order given; a CheckupError that fn raised comes back as
    the result, any other exception is raised here. A "path" may be any small picklable item naming a file
    (a (path, per-file data) pair, say). `fn` must be a module-level function; its result should be small, as
    it is pickled back: a report and a rank's compact cross-rank table (analysis/ranks.RankInput), not the
    trace's tables."""
    from concurrent.futures import ProcessPoolExecutor  # imported here: only folders of ranks need it

    jobs = min(jobs or cores(), len(paths))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_worker_start) as pool:
        pending: deque = deque()  # (path, future), in the order given
        todo = iter(paths)
        for path in todo:
            pending.append((path, pool.submit(_call, fn, path, args)))
            if len(pending) >= jobs * IN_FLIGHT_PER_WORKER:
                break
        while pending:
            path, fut = pending.popleft()
            result = fut.result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(_call, fn, nxt, args)))
            yield path, result

"""A DataLoader-only benchmark: the user's own loader, iterated alone, per num_workers / pin_memory.

The user names a factory `MODULE:FUNCTION` (MODULE a dotted import name or a path to a .py
file) with this signature, usually a one-line wrapper around the loader they already build:

    def make_loader(num_workers: int, pin_memory: bool) -> torch.utils.data.DataLoader:
        return DataLoader(my_dataset, batch_size=64, shuffle=True,
                          num_workers=num_workers, pin_memory=pin_memory)

Any iterable of batches works. Per setting the loader is built, iterated for warm-up batches
(at least WARMUP_BATCHES and at least one per worker, so every worker has started and delivered),
then `batches` more are timed with nothing else done to them (`for b in loader: pass`).
Measured per setting (docs/metrics.md, "DataLoader benchmark"):
- batches_per_s: timed batches / their wall time; samples_per_s when the batch's first tensor
  has a length.
- startup_s: from `iter(loader)` to the first batch (worker start-up, first fetches).
- worker_cpu_s: the CPU time (user + system) the worker processes spent over the timed batches,
  summed over the workers (each read at the first and at the last timed batch; a worker that is
  gone by then counts what it had); main_cpu_s: the same for the process iterating (all its
  threads: with num_workers=0 it builds the batches). worker_runq_s: the time the workers spent ready to run
  but waiting for a core (Linux's /proc/PID/schedstat; None elsewhere): on a busy host a worker that computes
  waits for a core rather than for data. Against the timed wall time they tell a loader that computes from
  one that waits (disk, network, a sleep): analysis/run_logs/loader_advice.py.
- per worker (the child processes the iterator started), sampled once after the timed batches
  while the workers are alive: RSS, shared (pages also mapped by other processes: the
  dataset's copy-on-write memory) and USS (pages only this worker holds: what one more worker
  really costs), in MB.
The CPU budget (count, affinity, cgroup quota) comes from capture/environment.py's
cpu_budget(), read in the process that runs the workers. Produces measurements only: the
advice is analysis/run_logs/loader_advice.py's, the rendering report/text/terminal_loader.py's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpucheckup.capture.environment import cpu_budget
from gpucheckup.errors import CheckupError

WARMUP_BATCHES = 3
DEFAULT_BATCHES = 50
DEFAULT_WORKERS = (0, 2, 4, 8, 16)


@dataclass
class LoaderRun:
    """One setting's measurement."""

    num_workers: int
    pin_memory: bool
    batches: int  # timed batches (fewer than asked when the loader ran out)
    seconds: float
    batches_per_s: float
    samples_per_s: float | None
    startup_s: float
    worker_pids: list[int] = field(default_factory=list)
    worker_rss_mb: list[float] = field(default_factory=list)
    worker_shared_mb: list[float] = field(default_factory=list)
    worker_uss_mb: list[float] = field(default_factory=list)
    main_rss_mb: float | None = None
    note: str = ""
    worker_cpu_s: float | None = None  # the workers' CPU seconds over the timed batches (None: not readable)
    main_cpu_s: float | None = None  # the iterating process's CPU seconds over the timed batches
    worker_runq_s: float | None = None  # the workers' seconds ready to run but waiting for a core (None: unknown)


@dataclass
class LoaderBench:
    """Every setting's measurement and the CPU budget of the process that ran them."""

    factory: str
    runs: list[LoaderRun]
    cpu: dict  # capture/environment.cpu_budget(): count, affinity, cgroup_quota_cpus, cgroup_source, usable
    accelerator: bool  # whether pin_memory could pin (torch saw a CUDA device)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def load_factory(spec: str):
    """The callable named by `MODULE:FUNCTION` (MODULE dotted, or a .py path); CheckupError otherwise."""
    if ":" not in spec:
        raise CheckupError(f"{spec!r}: expected MODULE:FUNCTION, e.g. train_data:make_loader "
                           "(a function make_loader(num_workers, pin_memory) returning your DataLoader)")
    mod_name, _, func = spec.rpartition(":")
    if not mod_name or not func:
        raise CheckupError(f"{spec!r}: expected MODULE:FUNCTION")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            path = Path(mod_name)
            if not path.is_file():
                raise CheckupError(f"{path}: no such file")
            sys.path.insert(0, str(path.resolve().parent))
            s = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(s)
            sys.modules[path.stem] = module  # worker processes started by spawn find it again by name
            s.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(mod_name)
    except CheckupError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module: say what it raised, in one line
        raise CheckupError(f"importing {mod_name}: {type(e).__name__}: {e}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise CheckupError(f"{mod_name} has no function {func!r}")
    return fn


def measure(factory, spec: str, workers=DEFAULT_WORKERS, pin=(False,), batches: int = DEFAULT_BATCHES,
            progress=None) -> LoaderBench:
    """Build and iterate the loader alone for every (num_workers, pin_memory); `progress` (the caller's
    rich Progress, or None) gets a task per setting: capture draws nothing itself."""
    if batches < 1:
        raise CheckupError(f"--batches must be at least 1, got {batches}")
    if any(w < 0 for w in workers):
        raise CheckupError(f"--workers must be 0 or more, got {','.join(map(str, workers))}")
    accel = _accelerator()
    notes = []
    if True in pin and not accel:
        notes.append("no CUDA device here: pin_memory=True pins nothing, so only pin_memory=False was measured")
        pin = tuple(p for p in pin if not p) or (False,)
    settings = [(w, p) for w in workers for p in pin]
    runs = []
    with warnings.catch_warnings():
        # torch's own "more workers than CPUs" warning: the advice says it, with the quota the job really has
        warnings.filterwarnings("ignore", message=".*worker processes in total.*", category=UserWarning)
        for w, p in settings:
            warm = max(WARMUP_BATCHES, w)
            task = progress.add_task(f"num_workers={w} pin_memory={p}", total=warm + batches) if progress else None
            runs.append(_one(factory, w, p, warm, batches,
                             (lambda t=task: progress.advance(t)) if progress else (lambda: None)))
            if progress:
                progress.remove_task(task)
    return LoaderBench(factory=spec, runs=runs, cpu=cpu_budget(), accelerator=accel, notes=notes)


def _one(factory, workers: int, pin: bool, warm: int, batches: int, tick) -> LoaderRun:
    """Measure one setting."""
    import psutil

    me = psutil.Process()
    try:
        loader = factory(num_workers=workers, pin_memory=pin)
    except Exception as e:  # noqa: BLE001 - the user's factory
        raise CheckupError(f"the factory raised {type(e).__name__}: {e} (called with num_workers={workers}, "
                           f"pin_memory={pin})") from None
    before = {c.pid for c in me.children(recursive=True)}
    t0 = time.perf_counter()
    try:
        it = iter(loader)
    except TypeError:
        raise CheckupError(f"the factory returned {type(loader).__name__}, not an iterable of batches") from None
    startup = None
    try:
        for _ in range(warm):
            next(it)
            if startup is None:
                startup = time.perf_counter() - t0
            tick()
    except StopIteration:
        raise CheckupError(f"num_workers={workers}: the loader ran out during the {warm} warm-up batches: make the "
                           "dataset longer") from None
    except Exception as e:  # noqa: BLE001 - the user's dataset or collate
        raise CheckupError(_raised(workers, e)) from None
    got, note, n_samples = 0, "", 0
    cpu_before = _cpu_seconds(me, before)
    start = time.perf_counter()
    try:
        for _ in range(batches):
            n = _batch_len(next(it))
            n_samples = None if n is None or n_samples is None else n_samples + n
            got += 1
            tick()
    except StopIteration:
        note = f"the loader ran out after {warm + got} batches"
        if got == 0:
            raise CheckupError(f"num_workers={workers}: {note}, before any timed batch: make the dataset longer "
                               f"than {warm} warm-up + {batches} batches, or lower --batches") from None
    except Exception as e:  # noqa: BLE001 - the user's dataset or collate
        raise CheckupError(_raised(workers, e)) from None
    seconds = time.perf_counter() - start
    cpu_after = _cpu_seconds(me, before)
    mem = _worker_memory(me, before)
    main_rss = me.memory_info().rss / 2**20
    del it
    return LoaderRun(num_workers=workers, pin_memory=pin, batches=got, seconds=seconds,
                     batches_per_s=got / seconds if seconds > 0 else float("inf"),
                     samples_per_s=n_samples / seconds if n_samples and seconds > 0 else None,
                     startup_s=startup or 0.0, worker_pids=[m[0] for m in mem],
                     worker_rss_mb=[m[1] for m in mem], worker_shared_mb=[m[2] for m in mem],
                     worker_uss_mb=[m[3] for m in mem], main_rss_mb=main_rss, note=note,
                     **_cpu_spent(cpu_before, cpu_after, workers))


def _raised(workers: int, e: Exception) -> str:
    """One line for an exception the user's loader raised."""
    first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
    return f"num_workers={workers}: the loader raised {type(e).__name__}: {first[:200]}"


def _runq_seconds(pid: int) -> float | None:
    """Seconds the process's main thread has waited, ready to run, for a core (/proc/PID/schedstat; None where
    the file is missing: not Linux, or the process gone)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _cpu_seconds(me, before: set[int]) -> tuple[float | None, dict[int, tuple[float, float | None]]]:
    """CPU seconds (user + system) so far of this process, and of each child started since `before` (by pid) its
    CPU seconds and its seconds waiting for a core."""
    import psutil

    def spent(proc) -> float:
        t = proc.cpu_times()
        return t.user + t.system

    try:
        main = spent(me)
    except psutil.Error:
        main = None
    kids = {}
    for c in me.children(recursive=True):
        if c.pid in before:
            continue
        try:
            kids[c.pid] = (spent(c), _runq_seconds(c.pid))
        except psutil.Error:
            continue
    return main, kids


def _cpu_spent(before, after, workers: int) -> dict:
    """main_cpu_s and worker_cpu_s between two _cpu_seconds readings; a worker seen at the start and gone at the end
    counts what it had at the start (its later time is lost: the figure is then a lower bound)."""
    (m0, k0), (m1, k1) = before, after
    out = {"main_cpu_s": m1 - m0 if m0 is not None and m1 is not None else None, "worker_cpu_s": None,
           "worker_runq_s": None}
    if workers and k0:
        out["worker_cpu_s"] = sum(max(k1.get(pid, t0)[0] - t0[0], 0.0) for pid, t0 in k0.items())
        if all(t0[1] is not None and k1.get(pid, t0)[1] is not None for pid, t0 in k0.items()):
            out["worker_runq_s"] = sum(max(k1.get(pid, t0)[1] - t0[1], 0.0) for pid, t0 in k0.items())
    elif workers == 0:
        out["worker_cpu_s"] = out["worker_runq_s"] = 0.0
    return out


def _worker_memory(me, before: set[int]) -> list[tuple[int, float, float, float]]:
    """(pid, RSS, shared, USS) in MB of the child processes started since `before` (the loader's workers)."""
    import psutil

    out = []
    for c in me.children(recursive=True):
        if c.pid in before:
            continue
        try:
            full = c.memory_full_info()
            out.append((c.pid, full.rss / 2**20, getattr(full, "shared", 0) / 2**20, full.uss / 2**20))
        except psutil.Error:
            continue
    return sorted(out)


def _batch_len(b) -> int | None:
    """The number of samples in a batch: the first dimension of its first tensor-like part."""
    for _ in range(4):
        if isinstance(b, dict):
            b = next(iter(b.values()), None)
        elif isinstance(b, (list, tuple)) and b:
            b = b[0]
        else:
            break
    shape = getattr(b, "shape", None)
    return int(shape[0]) if shape else None


def _accelerator() -> bool:
    """Whether torch sees a CUDA device (pin_memory needs one to pin)."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False

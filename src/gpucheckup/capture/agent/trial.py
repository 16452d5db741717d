"""Trial patches: configuration fixes the agent applies inside the job, for `gpucheckup try` only.

Active only where GPUCHECKUP_TRY names them (the `try` command sets it in its trial processes; a
plain `gpucheckup run` never does). Each patch is small, changes one setting the job's own code
would pass, and says what it did and where, or "not applied: why"; the job runs either way:

- dataloader_workers[=N]: DataLoader(num_workers=N, persistent_workers=True) where the job asked for
  fewer workers (N: the `try` command's, from the check-up's workers_to_keep_pace and the usable
  cores), as the advice says it: workers that are not persistent start again every epoch. Not applied to an
  IterableDataset (each worker would replay the whole stream unless the dataset shards itself) nor
  with a collate_fn whose code names `cuda` (a worker cannot build CUDA tensors).
- persistent_workers: DataLoader(persistent_workers=True) where it has workers.
- prefetch_factor[=K] (default 4): DataLoader(prefetch_factor=K) where it has workers.
- pin_memory: DataLoader(pin_memory=True) where CUDA is available.
- fused_optimizer: torch.optim.Adam, AdamW and SGD built with fused=True (foreach dropped), tried
  first; when torch refuses (a parameter type or device without a fused kernel, differentiable=True)
  the optimizer is built as the job asked and torch's reason is said.
- tf32: torch.set_float32_matmul_precision("high") and torch.backends.cudnn.allow_tf32 = True at
  torch's import (set again at the first step if the job turned them off).
- cudnn_benchmark: torch.backends.cudnn.benchmark = True, likewise.
- expandable_segments, cpu_threads[=N], env:NAME=VALUE: environment only. The `try` command sets
  the variable (PYTORCH_CUDA_ALLOC_CONF, OMP_NUM_THREADS, NCCL_...) before the job starts, so it
  is read before torch initialises CUDA or its thread pool; the agent says what the job saw.

Each application is one record {"fix", "applied", "how"} in trial.json (trial-rank<R>.json under
torchrun), rewritten atomically after each one. `how` names the job's own call as file:line (the
first frame outside torch; a library's call adds the job's frame that led to it). Standard library
only: it runs inside the user's job.
"""

from __future__ import annotations

import functools
import os
import sys

ENV_TRY = "GPUCHECKUP_TRY"
LOADER_FIXES = ("dataloader_workers", "persistent_workers", "prefetch_factor", "pin_memory")
BACKEND_FIXES = ("tf32", "cudnn_benchmark")
ENV_FIXES = ("expandable_segments", "cpu_threads", "env")
FIXES = LOADER_FIXES + ("fused_optimizer",) + BACKEND_FIXES + ENV_FIXES
DEFAULT_PREFETCH = 4  # DataLoader's own default is 2 batches per worker
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD")
MAX_RECORDS = 50
_HERE = os.path.dirname(os.path.abspath(__file__))


def parse(text: str) -> dict[str, str]:
    """{fix: value} from GPUCHECKUP_TRY ("dataloader_workers=8+pin_memory"; "+" or "," between fixes); unknown
    names are kept, for the agent to say it does not know them."""
    out: dict[str, str] = {}
    for part in text.replace(",", "+").split("+"):
        part = part.strip()
        if not part:
            continue
        if part.startswith("env:"):
            out[part] = ""
            continue
        name, _, value = part.partition("=")
        out[name.strip()] = value.strip()
    return out


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the CPU count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def call_site(frame) -> str:
    """The job's call as file:line: the first frame outside torch and gpucheckup; when that frame is a library's
    (site-packages), the job's own frame that led to it is added."""
    torch_dirs = ("/torch/", "/gpucheckup/capture/")
    first = None
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if not any(d in name for d in torch_dirs) and not name.startswith("<frozen"):
            where = f"{_short(name)}:{frame.f_lineno}"
            if first is None:
                first = where
                if "-packages/" not in name:
                    return first
            elif "-packages/" not in name and not name.startswith(sys.base_prefix):
                return f"{first} (from {where})"
        frame = frame.f_back
    return first or "?"


def _short(path: str) -> str:
    """A path relative to the working directory when under it; a library's from its package down."""
    cwd = os.getcwd().replace("\\", "/").rstrip("/") + "/"
    if path.startswith(cwd):
        return path[len(cwd):]
    if "-packages/" in path:
        return path.split("-packages/", 1)[1]
    return path


class Trial:
    """The fixes one trial process applies, and what became of each."""

    def __init__(self, text: str, write):
        self.wanted = parse(text)
        self.write = write  # write(records): publish trial.json (the agent's, atomic)
        self.records: list[dict] = []
        self.torch = None
        self.checked_first_step = False

    def note(self, fix: str, applied: bool, how: str) -> None:
        """Keep one record and publish them all (a record repeated, say for a DataLoader made every epoch, once)."""
        rec = {"fix": fix, "applied": applied, "how": how if applied else f"not applied: {how}"}
        if not applied and " already " in how and any(r["fix"] == fix and r["applied"] for r in self.records):
            return  # a framework rebuilding the loader it was given (accelerate, Lightning) with the fix applied
        if rec in self.records or len(self.records) >= MAX_RECORDS:
            return
        self.records.append(rec)
        self.write(self.records)

    # ---- at torch's import ----------------------------------------------------------------------
    def install(self, torch) -> None:
        """Patch what the wanted fixes need; say the unknown ones."""
        self.torch = torch
        for name in self.wanted:
            if name not in FIXES and not name.startswith("env:"):
                self.note(name, False, f"no such trial fix (known: {', '.join(FIXES)})")
        if any(f in self.wanted for f in LOADER_FIXES):
            self._wrap_loader(torch)
        if "fused_optimizer" in self.wanted:
            for cls_name in FUSED_OPTIMIZERS:
                self._wrap_optimizer(getattr(torch.optim, cls_name))
        self._set_backends()

    def _set_backends(self) -> list[str]:
        """Set the backend flags the wanted fixes ask for; the ones that were not set already."""
        torch, changed = self.torch, []
        if "tf32" in self.wanted and not (torch.get_float32_matmul_precision() == "high"
                                          and torch.backends.cudnn.allow_tf32):
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
            changed.append("tf32")
        if "cudnn_benchmark" in self.wanted and not torch.backends.cudnn.benchmark:
            torch.backends.cudnn.benchmark = True
            changed.append("cudnn_benchmark")
        return changed

    # ---- at the first optimizer step ------------------------------------------------------------
    def first_step(self) -> None:
        """Say what the backend and environment fixes came to, once the job has set itself up (its first step)."""
        if self.checked_first_step:
            return
        self.checked_first_step = True
        torch = self.torch
        cuda = bool(torch.cuda.is_initialized())
        again = self._set_backends()
        how = {"tf32": 'torch.set_float32_matmul_precision("high"), torch.backends.cudnn.allow_tf32 = True',
               "cudnn_benchmark": "torch.backends.cudnn.benchmark = True"}
        for fix in BACKEND_FIXES:
            if fix not in self.wanted:
                continue
            if not cuda:
                self.note(fix, False, "the job had not used CUDA by its first step; the setting changes only CUDA "
                                      "matmuls and convolutions")
            elif fix in again:
                self.note(fix, True, f"{how[fix]} at torch's import, and again at the first step: the job had set "
                                     "it back")
            else:
                self.note(fix, True, f"{how[fix]} at torch's import")
        if "expandable_segments" in self.wanted:
            var, conf = alloc_conf(os.environ)
            if "expandable_segments:true" not in conf.replace(" ", "").lower():
                self.note("expandable_segments", False, f"{var} in the job's environment is {conf!r}")
            elif not cuda:
                self.note("expandable_segments", False, "the job had not used CUDA by its first step; the setting "
                                                        "changes only CUDA's caching allocator")
            else:
                self.note("expandable_segments", True, f"{var}={conf} in the job's environment (read when CUDA's "
                                                       "allocator starts)")
        if "cpu_threads" in self.wanted:
            want = os.environ.get("OMP_NUM_THREADS", "")
            got = int(torch.get_num_threads())
            if want.isdigit() and int(want) == got:
                self.note("cpu_threads", True, f"OMP_NUM_THREADS={want}: torch.get_num_threads() is {got}")
            else:
                self.note("cpu_threads", False, f"OMP_NUM_THREADS={want or '(unset)'} but the job runs {got} "
                                                "intra-op threads (it sets its own: torch.set_num_threads)")
        for fix in self.wanted:
            if fix.startswith("env:"):
                name, _, value = fix[4:].partition("=")
                seen = os.environ.get(name)
                if seen == value:
                    self.note(fix, True, f"{name}={value} in the job's environment")
                else:
                    self.note(fix, False, f"{name} in the job's environment is {seen!r}, not {value!r}")

    # ---- DataLoader -----------------------------------------------------------------------------
    def _wrap_loader(self, torch) -> None:
        """Edit the arguments of every DataLoader the job builds, before DataLoader.__init__ sees them."""
        import inspect

        cls = torch.utils.data.DataLoader
        orig = cls.__init__
        names = [p.name for p in inspect.signature(orig).parameters.values()
                 if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
        trial = self

        @functools.wraps(orig)
        def __init__(loader, *args, **kwargs):
            if len(args) <= len(names):  # by name from here on (the edits read and set names)
                kwargs, args = dict(kwargs, **dict(zip(names, args))), ()
            try:
                trial.edit_loader(kwargs, call_site(sys._getframe(1)))
            except Exception as e:  # noqa: BLE001 - the job builds its DataLoader as it asked
                for fix in LOADER_FIXES:
                    if fix in trial.wanted:
                        trial.note(fix, False, f"the trial patch failed: {type(e).__name__}: {e}")
            return orig(loader, *args, **kwargs)

        cls.__init__ = __init__

    def edit_loader(self, kw: dict, where: str) -> None:
        """Apply the wanted DataLoader fixes to one call's arguments (edited in place); one record per fix."""
        torch, w = self.torch, self.wanted
        changes: list[str] = []
        applied: list[str] = []
        workers = int(kw.get("num_workers") or 0)
        if "dataloader_workers" in w:
            n = int(w["dataloader_workers"]) if w["dataloader_workers"].isdigit() else usable_cores()
            why = self._no_workers_why(kw)
            if workers >= n:
                self.note("dataloader_workers", False, f"DataLoader at {where} already has num_workers={workers}")
            elif why:
                self.note("dataloader_workers", False, f"DataLoader at {where}: {why}")
            else:
                changes.append(f"num_workers {workers} -> {n}")
                applied.append("dataloader_workers")
                kw["num_workers"] = workers = n
                if not kw.get("persistent_workers"):  # as the advice says: workers started once, not every epoch
                    kw["persistent_workers"] = True
                    changes.append("persistent_workers")
        if "persistent_workers" in w:
            if kw.get("persistent_workers"):
                self.note("persistent_workers", False, f"DataLoader at {where} already keeps its workers")
            elif workers == 0:
                self.note("persistent_workers", False, f"DataLoader at {where} has no workers (num_workers=0)")
            else:
                kw["persistent_workers"] = True
                changes.append("persistent_workers")
                applied.append("persistent_workers")
        if "prefetch_factor" in w:
            k = int(w["prefetch_factor"]) if w["prefetch_factor"].isdigit() else DEFAULT_PREFETCH
            cur = kw.get("prefetch_factor") or 2
            if workers == 0:
                self.note("prefetch_factor", False, f"DataLoader at {where} has no workers (num_workers=0)")
            elif cur >= k:
                self.note("prefetch_factor", False, f"DataLoader at {where} already prefetches {cur} batches a worker")
            else:
                kw["prefetch_factor"] = k
                changes.append(f"prefetch_factor {cur} -> {k}")
                applied.append("prefetch_factor")
        if "pin_memory" in w:
            if kw.get("pin_memory"):
                self.note("pin_memory", False, f"DataLoader at {where} already pins its batches")
            elif not torch.cuda.is_available():
                self.note("pin_memory", False, f"DataLoader at {where}: no CUDA device, and pinned memory speeds only "
                                               "copies to one")
            else:
                kw["pin_memory"] = True
                changes.append("pin_memory")
                applied.append("pin_memory")
        for fix in applied:
            self.note(fix, True, f"DataLoader({', '.join(changes)}) at {where}")

    def _no_workers_why(self, kw: dict) -> str:
        """Why this DataLoader cannot move its loading into worker processes; "" when it can."""
        dataset = kw.get("dataset")
        if isinstance(dataset, self.torch.utils.data.IterableDataset):
            return ("an IterableDataset is replayed whole by every worker unless it shards itself "
                    "(torch.utils.data.get_worker_info), so the job would train on each batch N times")
        code = getattr(kw.get("collate_fn"), "__code__", None)
        if code is not None and "cuda" in code.co_names:
            return "its collate_fn builds CUDA tensors, which a worker process cannot"
        return ""

    # ---- optimizers -----------------------------------------------------------------------------
    def _wrap_optimizer(self, cls) -> None:
        """Build every cls optimizer with fused=True when torch accepts it for all its parameters."""
        orig = cls.__init__
        trial = self

        @functools.wraps(orig)
        def __init__(opt, params, *args, **kwargs):
            if opt.__dict__.get("_gpucheckup_fusing"):  # AdamW's __init__ calling Adam's: the outer call decides
                return orig(opt, params, *args, **kwargs)
            opt.__dict__["_gpucheckup_fusing"] = True
            try:
                trial.fuse(orig, opt, params, args, kwargs, call_site(sys._getframe(1)))
            finally:
                opt.__dict__.pop("_gpucheckup_fusing", None)

        cls.__init__ = __init__

    def fuse(self, orig, opt, params, args, kwargs, where: str) -> None:
        """Build the optimizer fused, or as asked when torch refuses (its reason said)."""
        torch = self.torch
        name = type(opt).__name__
        if not isinstance(params, (list, tuple, torch.Tensor)):
            params = list(params)  # a generator is read once: both attempts need it
        if kwargs.get("fused"):
            self.note("fused_optimizer", False, f"{name} at {where} is fused already")
            return orig(opt, params, *args, **kwargs)
        fused = dict(kwargs, fused=True)
        dropped = " (foreach=True dropped)" if fused.pop("foreach", None) else ""
        try:
            orig(opt, params, *args, **fused)
        except (RuntimeError, ValueError, TypeError) as e:
            self.note("fused_optimizer", False, f"{name} at {where}: torch refuses fused=True: {e}")
            return orig(opt, params, *args, **kwargs)
        self.note("fused_optimizer", True, f"{name}(fused=True){dropped} at {where}")


def alloc_conf(environ) -> tuple[str, str]:
    """The caching allocator's settings variable the job's torch reads (PYTORCH_ALLOC_CONF when set, else
    PYTORCH_CUDA_ALLOC_CONF) and its value."""
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        if environ.get(var):
            return var, environ[var]
    return "PYTORCH_CUDA_ALLOC_CONF", ""

"""Fuzz `gpucheckup analyze` with mutated real traces, folders of ranks and run directories.

    python fuzz/run.py --cases 100000 --seed 1 [--report fuzz-report.json] [--subprocess-every 500] [--workers 2]
                       [--max-minutes 25]
    python fuzz/run.py --seed 1 --only 4711 --keep /tmp/case   # reproduce one case and keep its files

Each case runs in-process through `gpucheckup.cli.main` with `--debug` (so an uncaught exception
reaches us with its traceback instead of the one-line "internal error", exit 70) in a forked
worker; a case that has used HANG_S seconds of CPU time, or run HANG_WALL_S seconds of wall time, is a hang:
the worker is killed and restarted at the next case. Every `--subprocess-every`-th case, and every case with a
hostile file (a bomb, a sparse file, a FIFO, a device, a socket), also runs as a real, fresh `gpucheckup` process,
whose exit code must be 0, 2 or 4 and whose own peak resident set (VmHWM at its exit) is the case's peak RSS: the
summary sets the largest beside the largest legitimate input's own check-up, measured the same way. Outcomes: `checkup` (exit 0), `error` (a one-line
error, exit 2), `crash` (an uncaught exception, keyed by its type and the innermost gpucheckup
frame), `unsafe` (raw control or bidi characters reached the terminal or an error line), `hang`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutate  # noqa: E402

HANG_S = 20.0  # a case using more CPU time than this is a hang (CPU, not wall: on a shared machine a worker at
# nice 10 beside a load of 9 gets a fraction of a core, and a 2 s case took over 20 s of wall time)
HANG_WALL_S = 120.0  # a case running longer than this is a hang whatever its CPU time (one blocked uses none)
SLOW_S = 2.0  # cases slower than this are listed (not failures)
SUBPROCESS_TIMEOUT_S = 60.0
UNSAFE = {chr(c) for c in range(0x20) if c not in (9, 10)} | {"\x7f"} | {chr(c) for c in range(0x80, 0xa0)} | set(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


@contextlib.contextmanager
def _env_for_cases(root: Path):
    """A private cache folder (that exists, as after `gpucheckup ceilings`) and no colours."""
    cache = root / "cache"
    (cache / "gpucheckup").mkdir(parents=True, exist_ok=True)
    old = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "NO_COLOR", "COLUMNS")}
    os.environ.update(XDG_CACHE_HOME=str(cache), COLUMNS="120")
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _parser_once() -> None:
    """Build the CLI's parser once per worker, as one `gpucheckup` process does: building it again for every
    case cost about a fifth of a case (argparse looks up gettext catalogues for each of its ~150 arguments)."""
    import functools

    import gpucheckup.cli as cli

    if not hasattr(cli.build_parser, "cache_info"):
        cli.build_parser = functools.lru_cache(maxsize=1)(cli.build_parser)


def _case_root() -> str | None:
    """Where the cases' files go: a memory file system when there is one (writing and removing a few files per
    case on a disk mounted with `discard` cost ~10 ms a case), else the default temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def crash_key(e: BaseException) -> str:
    """Exception type and the innermost frame inside gpucheckup: one class of crash."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "gpucheckup" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].name}" if frames else "?"
    return f"{type(e).__name__} at {where}"


def invoke(argv: list[str]) -> tuple[str, str, str]:
    """Run the CLI in-process: (outcome, class, detail)."""
    from gpucheckup.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except RecursionError as e:
        return "crash", crash_key(e), "RecursionError"
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        return "crash", crash_key(e), f"{type(e).__name__}: {str(e)[:200]}"
    stderr = err.getvalue()
    if rc == 4 and len([ln for ln in stderr.splitlines() if "not written" in ln]) != 1:
        return "unsafe", "not-written line", repr(stderr[-300:])
    if rc in (0, 4):  # 4: a file asked for could not be written, said in one line (cli/emit.py)
        bad = UNSAFE & set(out.getvalue())
        if bad:
            return "unsafe", "terminal", repr(sorted(bad))
        for flag, what in (("--markdown", "Markdown"), ("--html", "HTML")):
            written = Path(argv[argv.index(flag) + 1]) if flag in argv else None
            if written and written.exists():  # a run directory without a timeline writes none
                bad = UNSAFE & set(written.read_text(errors="replace"))
                if bad:
                    return "unsafe", what, repr(sorted(bad))
        return "checkup", "", ""
    if rc == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        if len(lines) != 1 or UNSAFE & set(lines[0]):
            return "unsafe", "error line", repr(stderr[:300])
        return "error", lines[0][:60] if lines else "", ""
    return "crash", f"exit {rc}", stderr[-300:]


def run_case(seed: int, i: int, root: Path, subprocess_every: int) -> dict:
    """Build, write and run case i of the seed; one result row."""
    rnd = random.Random(f"{seed}:{i}")
    case = mutate.build_case(rnd)
    folder = root / f"case{i}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    try:
        argv = mutate.write_case(case, folder)
        reset_peak_rss()
        t0 = time.perf_counter()
        outcome, key, detail = invoke(argv)
        row = {"i": i, "outcome": outcome, "class": key, "s": round(time.perf_counter() - t0, 4),
               "kind": case.kind, "ops": case.ops, "options": case.options, "rss_mb": peak_rss_mb()}
        if detail:
            row["detail"] = detail
        hostile = any(o.startswith("hostile:") for o in case.ops)
        if hostile or (subprocess_every and i % subprocess_every == 0):  # its own peak, in a process of its own
            row["subprocess"] = run_subprocess(argv[1:])
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reset_peak_rss() -> None:
    """Start this process's peak resident set again from its current size (Linux: clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float | None:
    """This process's peak resident set since the last reset_peak_rss (VmHWM), in MB; None where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


LEGIT_OPTIONS = ["--html", "{out}/r.html", "--markdown", "{out}/r.md", "--perfetto", "{out}/p.json.gz", "--json",
                 "{out}/r.json"]


# The largest legitimate input the repository holds: a real H200 trace (48 MB of JSON), checked up whole.
LARGEST_REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200" / "graphs_reduce_overhead" / \
    "traces" / "trace.json.gz"


def legit_peak_rss(root: Path) -> dict:
    """The peak resident set of each legitimate input's own check-up: every corpus item unmutated, and the largest
    real trace (LARGEST_REAL), with every output and the terminal report, each in a fresh process (run_subprocess):
    the yardstick for the cases' own peaks, measured the same way. Also each corpus item's peak in this process
    (as the cases' in-worker figure is taken)."""
    peaks = {}
    items = [*mutate.corpus_items(), *([("trace", LARGEST_REAL)] if LARGEST_REAL.is_file() else [])]
    for kind, path in items:
        folder = root / f"legit-{path.parent.parent.name if path == LARGEST_REAL else path.name}"
        folder.mkdir()
        files = ({path.name: path.read_bytes()} if kind == "trace" else
                 {str(p.relative_to(path)): p.read_bytes() for p in mutate._files_under(path)})
        case = mutate.Case(kind, files, list(LEGIT_OPTIONS), [], path.name if kind == "trace" else ".")
        argv = mutate.write_case(case, folder)
        fresh = run_subprocess(argv[1:])
        entry = {"outcome": "checkup" if fresh["rc"] == 0 else f"exit {fresh['rc']}", "rss_mb": fresh["rss_mb"]}
        if path != LARGEST_REAL:
            shutil.rmtree(folder / "out")
            (folder / "out").mkdir()
            reset_peak_rss()
            invoke(argv)
            entry["worker_rss_mb"] = peak_rss_mb()
        peaks[f"{kind}:{folder.name[6:]}"] = entry
        shutil.rmtree(folder, ignore_errors=True)
    return peaks


# `gpucheckup ARGS` as a fresh process that writes its own peak resident set (VmHWM) to $PEAK_RSS_OUT at exit. Not
# the child's ru_maxrss (getrusage RUSAGE_CHILDREN, os.wait4): where the child is forked before its exec, the
# kernel keeps the larger of its old and new image's peaks, so a child of a worker that has grown could be charged
# for the worker's size; VmHWM read inside the new image is its own from the exec on, as `/usr/bin/time` (whose
# own small process forks the command) reports it.
MEASURED = """import atexit, os, sys
def _peak():
    with open("/proc/self/status") as f, open(os.environ["PEAK_RSS_OUT"], "w") as out:
        out.write(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
atexit.register(_peak)
sys.argv = ["gpucheckup", *sys.argv[1:]]
from gpucheckup.cli import entry
entry()
"""


def run_subprocess(argv: list[str]) -> dict:
    """The same case as a real, fresh `gpucheckup` process: its exit code, whether it was acceptable, and its own
    peak resident set in MB (None where /proc does not say)."""
    fd, peak = tempfile.mkstemp(prefix="peak-rss-")
    os.close(fd)
    t0 = time.perf_counter()
    try:
        try:
            p = subprocess.run([sys.executable, "-c", MEASURED, *argv], capture_output=True,
                               timeout=SUBPROCESS_TIMEOUT_S, env={**os.environ, "PEAK_RSS_OUT": peak})
        except subprocess.TimeoutExpired:
            return {"rc": None, "ok": False, "s": SUBPROCESS_TIMEOUT_S, "rss_mb": None}
        text = Path(peak).read_text()
    finally:
        os.unlink(peak)
    err = p.stderr.decode("utf-8", "replace").rstrip("\n")
    written = p.returncode != 4 or len([ln for ln in err.splitlines() if "not written" in ln]) == 1  # as invoke()
    ok = p.returncode in (0, 2, 4) and written and not (UNSAFE & set(err))
    return {"rc": p.returncode, "ok": ok, "s": round(time.perf_counter() - t0, 2),
            "rss_mb": round(int(text) / 1024, 1) if text.strip().isdigit() else None}


def _cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by a process (this one by default), from /proc."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _worker(seed: int, numbers: list[int], first: int, root: str, results: str, current, started,
            subprocess_every: int, deadline: float, cpu0=None):
    """Run cases numbers[first:] in order (current: the index of the one running), until the deadline."""
    rootp = Path(root)
    with open(results, "a") as f, _env_for_cases(rootp):
        for j in range(first, len(numbers)):
            if time.time() > deadline:
                break
            current.value = j
            started.value = time.time()
            if cpu0 is not None:
                cpu0.value = _cpu_s()
            row = run_case(seed, numbers[j], rootp, subprocess_every)
            f.write(json.dumps(row) + "\n")
            f.flush()
        current.value = len(numbers)


def _supervised(seed: int, numbers: list[int], root: str, results: Path, subprocess_every: int, progress: bool,
                t0: float, deadline: float) -> None:
    """Run the cases in one forked worker at a time; a hung or dead worker is recorded and replaced."""
    ctx = mp.get_context("fork")
    nxt = 0
    while nxt < len(numbers) and time.time() <= deadline:
        current, started, cpu0 = ctx.Value("q", nxt), ctx.Value("d", time.time()), ctx.Value("d", 0.0)
        w = ctx.Process(target=_worker, args=(seed, numbers, nxt, root, str(results), current, started,
                                              subprocess_every, deadline, cpu0))
        w.start()
        try:
            hung = _supervise(w, current, started, len(numbers), t0, progress, cpu0)
        finally:
            if w.is_alive():
                w.kill()
            w.join()
        row = None
        if hung:
            row = {"i": numbers[current.value], "outcome": "hang", "class": f"over {HANG_S:.0f} s", "s": HANG_S}
        elif w.exitcode != 0:  # the worker died (out of memory, a signal): count the case, go on
            row = {"i": numbers[min(current.value, len(numbers) - 1)], "outcome": "crash",
                   "class": f"worker died ({w.exitcode})", "s": 0}
        if row:
            with open(results, "a") as f:
                f.write(json.dumps(row) + "\n")
        nxt = current.value + 1 if current.value < len(numbers) else len(numbers)


def fuzz(cases: int, seed: int, start: int = 0, subprocess_every: int = 500, results: Path | None = None,
         progress: bool = True, workers: int = 1, max_minutes: float | None = None) -> dict:
    """Run cases [start, start+cases) of a seed: `workers` supervised workers, case i on worker i % workers, no
    case started after max_minutes; the totals of the cases that ran."""
    import gpucheckup.cli  # noqa: F401 - imported once, before the workers fork

    _parser_once()
    for kind in mutate.BOMB_HEADS:  # built once here, before the workers fork: never inside a case's hang timer
        mutate.gzip_bomb(kind)
    ctx = mp.get_context("fork")
    t0 = time.time()
    deadline = t0 + 60 * max_minutes if max_minutes else float("inf")
    numbers = list(range(start, start + cases))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops the workers too
    with tempfile.TemporaryDirectory(prefix="gpucheckup-fuzz-", dir=_case_root()) as root:
        with _env_for_cases(Path(root)):
            legit = legit_peak_rss(Path(root))
        results = results or Path(root) / "results.jsonl"
        results.write_text("")
        if workers <= 1:
            _supervised(seed, numbers, root, results, subprocess_every, progress, t0, deadline)
        else:  # each supervisor forks its own workers; rows go to the one file (one write per line, O_APPEND)
            sups = [ctx.Process(target=_supervised, args=(seed, numbers[k::workers], root, results,
                                                          subprocess_every, progress and k == 0, t0, deadline))
                    for k in range(workers)]
            for p in sups:
                p.start()
            try:
                for p in sups:
                    p.join()
            finally:
                for p in sups:
                    if p.is_alive():
                        p.terminate()
                        p.join()
        rows = sorted((json.loads(line) for line in results.read_text().splitlines() if line), key=lambda r: r["i"])
    summary = summarize(rows, seed, start, cases, time.time() - t0)
    summary["peak_rss"] = peak_rss_summary(rows, legit)
    return summary


def peak_rss_summary(rows: list[dict], legit: dict) -> dict:
    """Each case's own peak in a fresh process (every hostile case, and the subprocess sample) against the largest
    legitimate input's own check-up measured the same way; beside it, the in-worker figures (each case's peak in
    its long-lived worker, which keeps memory freed by earlier cases: not a case's own figure)."""
    legit_max = max(legit.items(), key=lambda kv: kv[1]["rss_mb"] or 0, default=("", {}))
    fresh = [r for r in rows if (r.get("subprocess") or {}).get("rss_mb")]
    worst = max(fresh, key=lambda r: r["subprocess"]["rss_mb"], default=None)
    by_kind: dict[str, float] = {}
    for r in fresh:
        for o in r.get("ops") or []:
            if o.startswith("hostile:"):
                k = o.split(":")[1] + (":" + o.split(":")[2] if o.startswith("hostile:bomb:") else "")
                by_kind[k] = max(by_kind.get(k, 0.0), r["subprocess"]["rss_mb"])
    worker_worst = max(rows, key=lambda r: r.get("rss_mb") or 0, default={})
    corpus_worker = max((v.get("worker_rss_mb") or 0 for v in legit.values()), default=0)
    lm = legit_max[1].get("rss_mb") or 0
    return {
        "method": "each case's own VmHWM in a fresh process (every hostile case and every --subprocess-every-th); "
                  "the legitimate inputs' the same way",
        "legit_max": legit_max[0], "legit_max_mb": lm,
        "fresh_cases": len(fresh), "fresh_hostile_cases": sum(any(o.startswith("hostile:") for o in r["ops"] or [])
                                                               for r in fresh),
        "case_max_mb": worst["subprocess"]["rss_mb"] if worst else None,
        "case_max_i": worst["i"] if worst else None, "case_max_ops": worst["ops"] if worst else None,
        "ratio": round(worst["subprocess"]["rss_mb"] / lm, 2) if worst and lm else None,
        "hostile_max_mb_by_kind": dict(sorted(by_kind.items())),
        "worker": {"case_max_mb": worker_worst.get("rss_mb"), "case_max_i": worker_worst.get("i"),
                   "corpus_max_mb": corpus_worker,
                   "note": "a case's peak in its long-lived worker, from the worker's size at the case's start"},
        # the largest resident set of any worker or subprocess over the whole run (Linux reports KiB)
        "any_process_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        "legit": legit,
    }


def _supervise(w, current, started, cases: int, t0: float, progress: bool, cpu0=None) -> bool:
    """Wait for the worker to finish; True (after killing it) when one case uses over HANG_S of CPU time, or runs
    over HANG_WALL_S (without cpu0: over HANG_S of wall time)."""
    last_report = time.time()
    while w.is_alive():
        w.join(0.5)
        wall = time.time() - started.value
        over = wall > HANG_S if cpu0 is None else (wall > HANG_WALL_S or _cpu_s(w.pid) - cpu0.value > HANG_S)
        if w.is_alive() and over:
            w.kill()
            return True
        if progress and time.time() - last_report > 60:
            last_report = time.time()
            print(f"  {current.value} / {cases} cases (this worker), {time.time() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    return False


def summarize(rows: list[dict], seed: int, start: int, cases: int, wall_s: float) -> dict:
    """Totals by outcome, crash classes with their first case, the slowest cases, the subprocess sample."""
    outcomes = collections.Counter(r["outcome"] for r in rows)
    classes: dict[str, dict] = {}
    for r in rows:
        if r["outcome"] in ("crash", "hang", "unsafe"):
            c = classes.setdefault(f"{r['outcome']}: {r['class']}", {"count": 0, "first_case": r["i"],
                                                                      "ops": r.get("ops"), "detail": r.get("detail")})
            c["count"] += 1
    subs = [r["subprocess"] for r in rows if "subprocess" in r]
    errors = collections.Counter(r["class"].split("error: ")[-1].split(":")[0][:40] for r in rows
                                 if r["outcome"] == "error")
    return {
        "seed": seed, "first_case": start, "cases": len(rows), "asked": cases, "wall_s": round(wall_s, 1),
        "outcomes": dict(outcomes), "failure_classes": classes,
        "slowest": sorted(({"i": r["i"], "s": r["s"], "ops": r.get("ops")} for r in rows),
                          key=lambda r: -r["s"])[:5],
        "over_slow_s": sum(r["s"] > SLOW_S for r in rows),
        "subprocess": {"cases": len(subs), "ok": sum(s["ok"] for s in subs),
                       "exit_codes": dict(collections.Counter(str(s["rc"]) for s in subs))},
        "kinds": dict(collections.Counter(r.get("kind", "?") for r in rows)),
        "error_messages_top": errors.most_common(5),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="first case number")
    p.add_argument("--subprocess-every", type=int, default=500, help="also run every N-th case as a subprocess")
    p.add_argument("--workers", type=int, default=1, help="worker processes (case i runs on worker i %% N)")
    p.add_argument("--max-minutes", type=float, help="start no case after this many minutes (the totals say how many ran)")
    p.add_argument("--report", type=Path, help="write the totals as JSON here")
    p.add_argument("--results", type=Path, help="keep one JSON line per case here")
    p.add_argument("--only", type=int, help="run just this case number, in this process, and print its outcome")
    p.add_argument("--keep", type=Path, help="with --only: write the case's files into this (new) folder")
    p.add_argument("--hostile-share", type=float, default=mutate.HOSTILE_SHARE,
                   help=f"share of cases with a bomb, sparse file, FIFO or device in a file's place "
                        f"(default {mutate.HOSTILE_SHARE})")
    a = p.parse_args()
    mutate.HOSTILE_SHARE = a.hostile_share
    if a.only is not None:
        case = mutate.build_case(random.Random(f"{a.seed}:{a.only}"))
        folder = a.keep or Path(tempfile.mkdtemp(prefix="gpucheckup-case-"))
        folder.mkdir(parents=True, exist_ok=True)
        argv = mutate.write_case(case, folder)
        print("ops:", case.ops, "\nargv: gpucheckup", " ".join(argv))
        with _env_for_cases(folder):
            print(invoke(argv))
        return 0
    s = fuzz(a.cases, a.seed, a.start, a.subprocess_every, a.results, workers=a.workers, max_minutes=a.max_minutes)
    text = json.dumps(s, indent=2)
    print(text)
    if a.report:
        a.report.write_text(text + "\n")
    return 0 if not s["failure_classes"] else 1


if __name__ == "__main__":
    sys.exit(main())

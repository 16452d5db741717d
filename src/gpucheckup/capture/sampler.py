"""The light window's host sampling, outside the job: py-spy stacks of every thread while a process's window runs.

The agent of a light window (agent/light.py) writes the mark `sampling[-<key>].start` ("<pid> <unix time>")
when its window begins and `sampling[-<key>].stop` when it ends. This launcher thread polls for the marks
every POLL_S; at a start mark it spawns `py-spy record --pid <pid> --format chrometrace --idle
--nonblocking --threads --rate <hz>` (never pausing the job; --threads names each thread in an outermost
pseudo-frame `thread (<tid>): <name>`), and at the stop mark (or when the job ends) it
interrupts py-spy, which writes its trace, and converts it into `host-samples[-<key>].json`
(layout.HOST_SAMPLES_KEYS): the main thread's stack at every change, in microseconds after py-spy was
spawned, and the other threads' names.

Clock: py-spy's chrometrace `ts` counts microseconds from the moment its recorder is made, which is
before it attaches to the job; spawned_epoch_s (time.time() just before the spawn) is that zero to
about a millisecond (measured: a function entered at a known wall time appeared 0-5 ms later at 200 Hz,
the sampling period, with no constant offset). Each change's `ts` is when py-spy's recorder took the sample from
its sampling thread, a little after the sample itself; py-spy samples at random intervals (exponential, mean
1/rate: analysis/run_logs/sampled_causes.py says what that does to a share). The analysis adds spawned_epoch_s to
`ts` to put samples on the trace's clock (the trace's baseTimeNanoseconds + ts is Unix time too).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpucheckup import layout
from gpucheckup.capture.telemetry import Sampler

POLL_S = 0.05  # how often the marks are looked for: the window's warm-up step starts sampling in time
STOP_WAIT_S = 20.0  # py-spy writes its trace on SIGINT; a window of 100 steps at 100 Hz writes in well under this
MAIN_THREAD = "MainThread"


def find_pyspy() -> str | None:
    """py-spy on PATH or beside this Python."""
    found = shutil.which("py-spy")
    if found:
        return found
    cand = Path(sys.executable).parent / "py-spy"
    return str(cand) if cand.exists() else None


class HostSampler(Sampler):
    """Starts and stops py-spy at the agents' marks and converts what it recorded."""

    def __init__(self, rd, hz: float):
        super().__init__(POLL_S, "gpucheckup-host-sampler")
        self.rd = rd  # the launcher's safe_dir.RunDirectory: what this writes goes through its descriptor
        self.run_dir = Path(rd.path)  # read-only uses: the agents' marks; py-spy's own output file
        self.hz = hz
        self.status = "not started"
        self.name = "host sampler"
        self.running: dict[str, dict] = {}  # key -> {"proc", "pid", "spawned", "raw"}
        self.done: dict[str, dict] = {}

    def open(self) -> bool:
        self.py_spy = find_pyspy()
        if self.py_spy is None:
            self.status = "unavailable: py-spy is not installed (pip install py-spy); no host samples"
            return False
        self.status = "ok"
        return True

    def tick(self) -> None:
        for mark in self.run_dir.glob(layout.SAMPLING_GLOB):
            key = _key_of(mark.name)
            if key in self.running or key in self.done:
                continue
            self._spawn(key, mark)
        for key in list(self.running):
            files = layout.agent_files(key)
            if (self.run_dir / files["sampling_stop"]).exists() or self.running[key]["proc"].poll() is not None:
                self._finish(key)

    def _spawn(self, key: str, mark: Path) -> None:
        try:
            pid = int(mark.read_text().split()[0])
        except (OSError, ValueError, IndexError) as e:
            self.done[key] = {"status": f"unreadable mark {mark.name}: {e}"}
            return
        raw = self.run_dir / f".py-spy-{key}.json"
        cmd = [self.py_spy, "record", "--pid", str(pid), "--format", "chrometrace", "--output", str(raw),
               "--rate", f"{self.hz:g}", "--idle", "--nonblocking", "--threads"]
        spawned = time.time()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.running[key] = {"proc": proc, "pid": pid, "spawned": spawned, "raw": raw}

    def _finish(self, key: str) -> None:
        r = self.running.pop(key)
        proc = r["proc"]
        ended = time.time()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        out = layout.agent_files(key)["host_samples"]
        try:
            events = json.loads(r["raw"].read_text())
        except (OSError, ValueError) as e:
            tail = (err or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
            self.done[key] = {"status": f"py-spy wrote no samples ({type(e).__name__}; {' '.join(tail)})"}
            return
        finally:
            r["raw"].unlink(missing_ok=True)
        main, threads = main_thread_changes(events)
        self.rd.write_json(out, {"pid": r["pid"], "key": key, "rate_hz": self.hz, "spawned_epoch_s": r["spawned"],
                                "ended_epoch_s": ended, "threads": threads, "main": main,
                                "py_spy": self.py_spy})
        self.done[key] = {"status": "ok", "file": out, "main_changes": len(main), "threads": len(threads)}

    def close(self) -> None:
        self.stop()
        for key in list(self.running):
            try:
                self._finish(key)
            except Exception as e:  # noqa: BLE001 - the run directory comes first
                self.done[key] = {"status": f"failed: {type(e).__name__}: {e}"}

    def summary(self) -> dict:
        return {"status": self.status, "hz": self.hz, "processes": self.done, "errors": self.errors}


def _key_of(mark_name: str) -> str:
    """The process key of a mark: `sampling.start` -> main, `sampling-rank1.start` -> rank1."""
    stem = mark_name.rsplit(".", 1)[0]
    return stem.split("-", 1)[1] if "-" in stem else layout.MAIN_KEY


def _thread_label(frame_name: str) -> str | None:
    """The thread name of py-spy's outermost pseudo-frame `thread (<tid>): <name>`, else None."""
    if frame_name.startswith("thread (") and "): " in frame_name:
        return frame_name.split("): ", 1)[1]
    return None


def main_thread_changes(events: list[dict]) -> tuple[list[list], dict[str, str]]:
    """From py-spy's chrometrace (B/E events on each stack change): the main thread's stack after every
    change as [ts_us, main_stack] (innermost first, layout.FRAME_SEP-joined `name@filename`; empty when
    it had no frames), and the names of all threads by py-spy's thread id."""
    names: dict[str, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            label = str((e.get("args") or {}).get("name") or "")
            names[str(e.get("tid"))] = label.split(": ", 1)[1] if ": " in label else label
    stacks: dict[str, list[str]] = {}
    main_tid = next((t for t, n in names.items() if n == MAIN_THREAD), None)
    out: list[list] = []
    last_ts = None
    for e in events:
        ph = e.get("ph")
        if ph not in ("B", "E"):
            continue
        tid = str(e.get("tid"))
        name = str(e.get("name") or "")
        label = _thread_label(name)
        if label is not None:  # older py-spy: the thread is the outermost pseudo-frame
            names[tid] = label
            if label == MAIN_THREAD:
                main_tid = tid
            continue
        st = stacks.setdefault(tid, [])
        if ph == "B":
            st.append(f"{name}{layout.FRAME_AT}{(e.get('args') or {}).get('filename') or ''}")
        elif st:
            st.pop()
        if tid != main_tid:
            continue
        ts = float(e.get("ts") or 0.0)
        stack = layout.FRAME_SEP.join(reversed(st))
        if out and last_ts == ts:
            out[-1][1] = stack
        else:
            out.append([ts, stack])
        last_ts = ts
    return out, names

"""Regression tests for the crash and hang classes that fuzzing found (docs/reliability.md), each with
its minimal input (fuzz/minimal.py builds the synthetic traces)."""

from __future__ import annotations

import collections
import contextlib
import gzip
import io
import json
import re
import shutil
import signal
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.one_trace.gpu.kernels import kernel_label
from gpucheckup.analysis.flops.shape_flops import op_flops
from gpucheckup.analysis.one_trace.host.syncs import _enclosing_all
from gpucheckup.analysis.one_trace.timeline import Gaps, gap_pattern
from gpucheckup.cli import main
from gpucheckup.document import Finding, Fix
from gpucheckup.hardware.ceilings import default_path
from gpucheckup.report.text.lines import cost_line as cost_text
from gpucheckup.trace.reader import read_trace
from gpucheckup.trace.tables import CPU_OP, PYTHON, RUNTIME

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))
import minimal  # noqa: E402
from conftest import read_report

HANG_S = 20  # the fuzzing's hang bound: a case past it is a hang
RUN_SEED = ROOT / "fuzz" / "corpus" / "runs" / "20261129-105908-input_bound"


class Hang(Exception):
    pass


@contextlib.contextmanager
def hang_bound(seconds: int = HANG_S):
    """Fail (not wait forever) when the block runs past the fuzzing's hang bound."""
    def _raise(*_):
        raise Hang(f"over {seconds} s")
    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def analyze(path: Path, *options: str) -> tuple[int, str, str]:
    """`gpucheckup --debug analyze PATH OPTIONS` in-process: an uncaught exception fails the test with its traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), hang_bound():
        rc = main(["--debug", "analyze", str(path), *map(str, options)])
    return rc, out.getvalue(), err.getvalue()


def outputs(tmp_path: Path) -> list[str]:
    return ["--html", tmp_path / "r.html", "--markdown", tmp_path / "r.md", "--perfetto", tmp_path / "p.json.gz",
            "--json", tmp_path / "r.json"]


# ---- shapes on GEMMs ----

def test_gemm_with_input_type_null_and_non_integer_dims_is_not_counted(tmp_path):
    """Class: `"Input type": null` with non-integer dims on a GEMM (TypeError in shape_flops)."""
    assert op_flops("aten::mm", b"[[2.5, 3.5], [3.5, 4.5]]", b"null", None) is None
    counted = op_flops("aten::mm", b"[[64, 128], [128, 32]]", b"null", None)  # good shapes, no types: counted
    assert counted.flops == 2 * 64 * 128 * 32 and counted.dtype == ""
    trace = minimal.write(minimal.steps_trace(4, gemm={"Input Dims": [[2.5, 3.5], [3.5, 4.5]], "Input type": None}),
                          tmp_path / "t.json")
    assert analyze(trace)[0] == 0


@pytest.mark.parametrize("dims", [[[1e308, 1e308], [1e308, 1e308]], [[10 ** 400, 2], [2, 2]], [[-4, 8], [8, -4]],
                                  [["a", "b"], ["c", "d"]], [[2 ** 62, 2 ** 62], [2 ** 62, 2 ** 62]]],
                         ids=["1e308", "400 digits", "negative", "strings", "over 2^40"])
def test_gemm_with_absurd_dims_is_not_counted(dims):
    """Class: shape dims of 1e308 (OverflowError converting the FLOPs)."""
    assert op_flops("aten::mm", json.dumps(dims).encode(), b'["c10::BFloat16", "c10::BFloat16"]', None) is None


def test_gemm_with_dims_of_1e308_checks_up_with_every_output(tmp_path):
    trace = minimal.write(minimal.steps_trace(4, gemm={"Input Dims": [[1e308, 1e308], [1e308, 1e308]],
                                                       "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
                          tmp_path / "t.json")
    assert analyze(trace, *outputs(tmp_path))[0] == 0


# ---- the reader's classes (the old reader raised; the streaming reader's own tests: tests/test_reader.py) ----

def _with_raw_event(raw: str, path: Path) -> Path:
    """A four-step trace with one more event written as raw JSON text (what the json module cannot write)."""
    text = json.dumps(minimal.steps_trace(4))
    return minimal.write(text[: text.rindex("]")] + ", " + raw + "]}", path)


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_a_trace_nested_1000_levels_deep_is_one_line(tmp_path, depth):
    """Class: a trace nested 1,000 levels deep (RecursionError in the decoder, 1,415 audit cases)."""
    raw = '{"ph": "X", "cat": "kernel", "name": "d", "ts": 1, "dur": 1, "args": {"x": ' + "[" * depth + "]" * depth + "}}"
    for name in ("t.json", "t.json.gz"):
        rc, out, err = analyze(_with_raw_event(raw, tmp_path / name), *outputs(tmp_path))
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "nested too deeply" in err


@pytest.mark.parametrize("field", ["ts", "dur", "pid", "tid", "correlation", "External id", "device", "stream"])
def test_400_digit_integers_check_up_with_every_output(tmp_path, field):
    """Class: 400-digit integers for `ts`/`dur`/ids (OverflowError in the old reader): the event is left out and
    the check-up says so."""
    big = "9" * 400
    event = {"ph": "X", "cat": "kernel", "name": "huge", "pid": 0, "tid": 7, "ts": 1200.0, "dur": 5.0,
             "args": {"device": 0, "stream": 7, "correlation": 99, "External id": 99}}
    target = event if field in event else event["args"]
    target[field] = "BIG"
    path = _with_raw_event(json.dumps(event).replace('"BIG"', big), tmp_path / "t.json")
    rc, out, err = analyze(path, *outputs(tmp_path))
    assert rc == 0 and not err.strip()
    report = read_report(tmp_path / "r.json")
    assert report["kernels"]["count"] == 4  # the four steps' kernels, not the huge one
    assert report["notes"] == ["1 events with fields of unexpected types could not be read and were ignored"]


# ---- the GPU's name ----

def test_gpu_name_of_300_characters_with_a_ceilings_cache(tmp_path, monkeypatch):
    """Class: a GPU name over ~240 characters once ~/.cache/gpucheckup/ exists (File name too long)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "cache" / "gpucheckup").mkdir(parents=True)
    doc = minimal.steps_trace(4)
    doc["deviceProperties"][0]["name"] = "NVIDIA H200" + "x" * 300
    rc, out, _ = analyze(minimal.write(doc, tmp_path / "t.json"))
    assert rc == 0 and "H200xxxxxx" in out
    assert len(default_path("NVIDIA " + "H" * 5000).name.encode()) < 255
    assert default_path("NVIDIA H200").name == "ceilings-nvidia-h200.json"


# ---- absurd times ----

def test_a_cost_that_is_not_finite_is_said_not_measurable():
    """Class: `ts` of 1.7e308 made a finding's cost None, which the terminal formatted with `:.2f`."""
    def finding(ms, pct):
        return Finding(id="sync_points", severity="warning", title="t", rule="r", cost_ms_per_step=ms,
                       cost_pct_of_step=pct, evidence=[], events=[], fix=[])

    assert cost_text(finding(None, None)) == "cost not measurable"
    assert cost_text(finding(1.234, 5.67)) == "1.23 ms/step (5.7%)"


@pytest.mark.parametrize("where", [-1, 2], ids=["last kernel", "first step"])
def test_an_event_at_ts_1_7e308_prints_a_checkup_or_one_line(tmp_path, where):
    doc = minimal.steps_trace(4)
    doc["traceEvents"][where]["ts"] = 1.7e308
    rc, out, err = analyze(minimal.write(doc, tmp_path / "t.json"))
    assert rc in (0, 2)


def test_infinite_step_times_with_perfetto(tmp_path):
    """Class: inf step times with --perfetto."""
    doc = minimal.steps_trace(4)
    doc["traceEvents"][2]["dur"] = 1.7e308
    text = json.dumps(doc)
    for name, data in (("huge.json", text), ("inf.json", text.replace("1.7e+308", "1e999"))):
        rc, _, err = analyze(minimal.write(data, tmp_path / name), "--perfetto", tmp_path / "p.json.gz")
        assert rc in (0, 2) and (rc == 0 or len(err.strip().splitlines()) == 1)


def test_a_step_at_ts_1e308_with_perfetto(tmp_path):
    """Class: a step ending near 1e308 us with --perfetto (OverflowError converting it to nanoseconds)."""
    doc = minimal.steps_trace(4)
    last = [e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#3"][0]
    last["ts"] = 1e308
    rc, _, err = analyze(minimal.write(doc, tmp_path / "t.json"), "--perfetto", tmp_path / "p.json.gz")
    assert rc in (0, 2)
    if rc == 2:  # the reader keeps the step: the annotated trace cannot place it
        assert err.strip().endswith("a time of 1e+308 us cannot be placed in the annotated trace")


def test_events_6e_10_us_apart_with_html(tmp_path):
    """Class: two events 6e-10 us apart with --html (ZeroDivisionError in the plots)."""
    doc = minimal.steps_trace(4)
    for i, e in enumerate(doc["traceEvents"][2:]):
        e["ts"] = 1000.0 + i * 6e-10
        e["dur"] = 6e-10
    assert analyze(minimal.write(doc, tmp_path / "t.json"), *outputs(tmp_path))[0] == 0


# ---- run directories ----

@pytest.mark.parametrize("file, column, cell", [("steps.csv", "ms", "inf"), ("steps.csv", "step", "nan"),
                                                ("steps.csv", "ms", "1e999"), ("nvml.csv", "t_s", "-inf"),
                                                ("nvml.csv", "util_pct", "nan"), ("cpu.csv", "cpu_pct", "inf")])
def test_non_finite_cells_in_a_run_directory_are_one_line(tmp_path, file, column, cell):
    """Class: NaN/inf in a run directory's steps.csv or NVML rows (OverflowError in the step figures)."""
    run = tmp_path / "run"
    shutil.copytree(RUN_SEED, run)
    lines = (run / file).read_text().splitlines()
    header = lines[0].split(",")
    row = lines[3].split(",")
    row[header.index(column)] = cell
    lines[3] = ",".join(row)
    (run / file).write_text("\n".join(lines) + "\n")
    rc, _, err = analyze(run)
    assert rc == 2
    assert err.strip() == f"gpucheckup: error: {run / file}: line 4, column {column}: {cell!r} is not a finite number"


@pytest.mark.parametrize("column, cell", [("ms", "-1e308"), ("ms", "1e308"), ("ms", "-3"), ("step", "-1"),
                                          ("step", "1e300")])
def test_step_numbers_and_times_out_of_range_are_one_line(tmp_path, column, cell):
    """Class: a step time of -1e308 ms in steps.csv (a None steady median formatted in the terminal)."""
    run = tmp_path / "run"
    shutil.copytree(RUN_SEED, run)
    lines = (run / "steps.csv").read_text().splitlines()
    header = lines[0].split(",")
    row = lines[21].split(",")
    row[header.index(column)] = cell
    lines[21] = ",".join(row)
    (run / "steps.csv").write_text("\n".join(lines) + "\n")
    rc, _, err = analyze(run)
    assert rc == 2
    assert err.strip().startswith(f"gpucheckup: error: {run / 'steps.csv'}: line 22, column {column}: {float(cell)!r}")
    assert "is out of range" in err


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1" + "0" * 400])
def test_non_finite_or_huge_numbers_in_a_manifest_are_one_line(tmp_path, value):
    run = tmp_path / "run"
    shutil.copytree(RUN_SEED, run)
    text = (run / "manifest.json").read_text()
    text = re.sub(r'"duration_s": [^,}]+', f'"duration_s": {value}', text)
    (run / "manifest.json").write_text(text)
    rc, _, err = analyze(run)
    assert rc == 2 and "field 'duration_s' should be a number" in err


# ---- hangs: superlinear time ----

OLD_INNER = re.compile(r"(\w+_kernel_impl\w*|\w*Functor\w*|\w+_kernel_cuda|Reduce\w+|\w+_functor)")


def test_kernel_label_of_a_million_character_name():
    """Class: kernel_label's regex backtracked quadratically on long names (8,000 characters: 2.7 s)."""
    with hang_bound():
        label = kernel_label("void at::native::kernel<" + "a" * 1_000_000)
        kernel_label("void " + "x_kernel_cuda" * 100_000 + "a" * 100_000)
    assert label.startswith("aaaa") and label.endswith("...")


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(["_kernel_impl", "Functor", "_kernel_cuda", "Reduce", "_functor", "a", "_", "R",
                                 "<", ",", "::", " ", "(", "e"]), max_size=10).map("".join))
def test_kernel_label_names_the_same_inner_op_as_the_old_regex(tail):
    name = "void at::native::elementwise_kernel<" + tail
    head = name.removeprefix("void ")
    old = [i for i in OLD_INNER.findall(head[len("at::native::elementwise_kernel"):]) if i != "elementwise_kernel"]
    label = kernel_label(name)
    assert label == "elementwise_kernel" if not old else label.startswith("elementwise_kernel (")


def test_16000_one_kernel_steps_with_a_sync_each(tmp_path):
    """Class: analysis time grew with the square of the steps (gap_pattern: 16,000 steps, 30.8 s) and of sync calls
    x host events (sync_stats)."""
    trace = minimal.write(minimal.steps_trace(16_000, sync=True), tmp_path / "t.json.gz")
    rc, _, _ = analyze(trace, "--quiet", "--json", tmp_path / "r.json")
    assert rc == 0
    r = read_report(tmp_path / "r.json")
    assert r["steps"]["count"] == 16_000
    assert r["sync"]["count_per_step"] == pytest.approx(1.0, abs=0.01)


def test_16000_steps_on_four_gpus_with_every_output(tmp_path):
    """Class: the annotated trace took every gap's and step's duration as a new array per gap and step, and a mask
    per device (steps x steps: 16,000 one-kernel steps on four GPUs, 4.8 s of CPU, now 2.7 s, the same file)."""
    doc = minimal.steps_trace(16_000)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["args"]["device"] = e["pid"] = e["args"]["correlation"] % 4
    rc, _, err = analyze(minimal.write(doc, tmp_path / "t.json.gz"), "--quiet", *outputs(tmp_path))
    assert rc == 0, err
    with gzip.open(tmp_path / "p.json.gz", "rt") as f:
        ev = json.load(f)["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
    per_gpu = collections.Counter(tracks[(e["pid"], e["tid"])] for e in ev
                                  if e.get("ph") == "X" and tracks.get((e["pid"], e["tid"]), "").startswith("idle gaps"))
    # every GPU idles once per step (its kernel runs in one step of four), from one step's kernel to the next
    assert sorted(per_gpu) == [f"idle gaps: GPU {d}" for d in range(4)]
    assert all(n >= 16_000 // 4 - 2 for n in per_gpu.values())


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["cpu_op", "python_function", "cuda_runtime"]),
                          st.integers(0, 40), st.integers(0, 20)), min_size=1, max_size=40))
def test_enclosing_by_one_sweep_equals_enclosing_per_row(tmp_path_factory, events):
    """The sweep that made sync_stats linear finds the same enclosing ops and frames, outermost first, as the
    per-row search it replaced, on any intervals (nested, overlapping, equal, zero-length)."""
    ev = [{"ph": "X", "cat": cat, "name": f"{cat}{i}", "pid": 1 + thread // 2, "tid": thread % 2, "ts": 1000.0 + ts,
           "dur": float(dur)} for i, (thread, cat, ts, dur) in enumerate(events)]  # threads differ by pid, tid
    doc = {"schemaVersion": 1, "traceEvents": ev}
    path = minimal.write(doc, tmp_path_factory.mktemp("enc") / "t.json")
    trace = read_trace(path)
    rows = np.flatnonzero(trace.host.cat == RUNTIME)
    for cats in ((CPU_OP,), (PYTHON,)):
        swept = _enclosing_all(trace, rows, cats)
        assert swept == {int(r): [int(x) for x in host_calls.enclosing(trace, int(r), cats)] for r in rows}


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["train.py(1): f", "torch/nn/x.py(2): g", "cuda_runtime"]),
                          st.integers(0, 40), st.integers(0, 20)), min_size=1, max_size=40))
def test_user_frames_by_one_sort_equals_user_frame_per_row(tmp_path_factory, events):
    """user_frames (frames and queries grouped by thread by one sort, not a mask per thread) names the same
    innermost user frame as the per-row search, on properly nested frames of four threads (pid and tid)."""
    kept: list[tuple] = []
    for thread, name, ts, dur in events:
        ok = name == "cuda_runtime" or all(
            k[0] != thread or k[1] == "cuda_runtime" or ts + dur < k[2] or k[2] + k[3] < ts
            or (k[2] <= ts and ts + dur <= k[2] + k[3]) or (ts <= k[2] and k[2] + k[3] <= ts + dur) for k in kept)
        if ok:
            kept.append((thread, name, ts, dur))
    ev = [{"ph": "X", "cat": "cuda_runtime" if name == "cuda_runtime" else "python_function",
           "name": name if name == "cuda_runtime" else f"{name}{i}", "pid": 1 + thread // 2, "tid": thread % 2,
           "ts": 1000.0 + ts, "dur": float(dur)} for i, (thread, name, ts, dur) in enumerate(kept)]
    trace = read_trace(minimal.write({"schemaVersion": 1, "traceEvents": ev}, tmp_path_factory.mktemp("uf") / "t.json"))
    trace.with_stack = True
    rows = np.flatnonzero(trace.host.cat == RUNTIME)
    assert host_calls.user_frames(trace, rows) == [host_calls.user_frame(trace, int(r)) for r in rows]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 2), st.floats(0, 100)), max_size=60))
def test_gap_pattern_by_one_sort_equals_the_per_step_loop(gaps):
    """gap_pattern's largest-gap share, now from one sort, equals the per-(step, device) loop it replaced."""
    step = np.array([g[0] for g in gaps], dtype=np.int64)
    dev = np.array([g[1] for g in gaps], dtype=np.int64)
    start = np.arange(len(gaps), dtype=float) * 1000
    g = Gaps(device=dev, start=start, end=start + np.array([x[2] for x in gaps]), step=step,
             position=np.full(len(gaps), 0.5))
    got = gap_pattern(types.SimpleNamespace(gaps=g), None)
    idle = float(g.dur.sum())
    largest = 0.0
    for s in np.unique(g.step[g.step >= 0]):
        for d in np.unique(g.device):
            x = g.dur[(g.step == s) & (g.device == d)]
            if len(x):
                largest += float(x.max())
    if idle > 0 and len(g):
        assert got.largest_gap_share_pct == pytest.approx(100 * largest / idle, rel=1e-12)
    else:
        assert got.largest_gap_share_pct == 0.0


def test_seed_corpus_is_small_and_real():
    """The fuzzing corpus stays a few hundred KB and every seed checks up."""
    files = [p for p in (ROOT / "fuzz" / "corpus").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 2_000_000
    for p in sorted((ROOT / "fuzz" / "corpus" / "traces").glob("*.json.gz")):
        assert json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2),
                          st.one_of(st.none(), st.floats(0, 1000, allow_nan=False))), min_size=1, max_size=80))
def test_nvml_series_by_bincount_equals_the_per_tick_loop(samples):
    """gpu_series' per-tick mean/sum/max, now by bincount, equals the loop with a mask per tick it replaced."""
    from gpucheckup.analysis.run_logs.telemetry import gpu_series

    t = np.array([s[0] for s in samples], dtype=float)
    v = np.array([np.nan if s[2] is None else s[2] for s in samples])
    nvml = {"t_s": t, "gpu": np.array([s[1] for s in samples], dtype=float), "util_pct": v, "mem_used_mb": v,
            "mem_total_mb": v, "power_w": v, "sm_clock_mhz": v, "clock_reasons": np.where(np.isfinite(v), 4.0, np.nan)}
    got = gpu_series(nvml)
    sel = np.isin(nvml["gpu"], got["gpus"])
    times, inv = np.unique(t[sel], return_inverse=True)
    for key, col, how in (("util", "util_pct", np.mean), ("power", "power_w", np.sum)):
        want = np.full(len(times), np.nan)
        for i in range(len(times)):
            x = nvml[col][sel][inv == i]
            x = x[np.isfinite(x)]
            if len(x):
                want[i] = how(x)
        np.testing.assert_allclose(got[key], want, rtol=1e-12, equal_nan=True)


def test_nvml_of_a_long_run_and_a_trace_with_thousands_of_streams(tmp_path):
    """Class (same pattern, found by review): a mask per NVML tick (quadratic in a long run's samples) and a mask
    per stream (quadratic in a trace with thousands of streams)."""
    from gpucheckup.analysis.run_logs.telemetry import gpu_series

    n = 200_000  # about 5.5 hours at 10 Hz
    t = np.arange(n, dtype=float) / 10
    nvml = {"t_s": t, "gpu": np.zeros(n), "util_pct": np.full(n, 50.0), "mem_used_mb": np.full(n, 1e3),
            "mem_total_mb": np.full(n, 1e5), "power_w": np.full(n, 300.0), "sm_clock_mhz": np.full(n, 1980.0),
            "clock_reasons": np.zeros(n)}
    with hang_bound():
        s = gpu_series(nvml)
    assert len(s["t_s"]) == n and float(np.mean(s["power"])) == 300.0
    doc = minimal.steps_trace(8000)
    for i, e in enumerate(x for x in doc["traceEvents"] if x.get("cat") == "kernel"):
        e["args"]["stream"] = 1000 + i
    rc, _, _ = analyze(minimal.write(doc, tmp_path / "t.json.gz"), "--quiet", "--json", tmp_path / "r.json")
    assert rc == 0 and read_report(tmp_path / "r.json")["steps"]["count"] == 8000


def test_evidence_events_hold_plain_floats_whatever_computed_them():
    """A run-level finding's events were timed with numpy scalars (a 64-step CPU job's unstable_run), and the
    JSON encoder refused them: 'no check-up ... Encoding objects of type numpy.float64 is unsupported'."""
    import msgspec
    import numpy as np

    from gpucheckup.diagnosis.findings import Event

    ev = Event(name="slow step", where="steps.csv", start_ms=np.float64(9636.73), dur_ms=np.float32(184.5),
               t_us=np.float64(1.5))
    assert msgspec.json.decode(msgspec.json.encode(ev)) == {"name": "slow step", "where": "steps.csv",
                                                            "start_ms": 9636.73, "dur_ms": 184.5, "t_us": 1.5}


# ---- classes still open after the 100,000-case run (docs/reliability.md) ----

@pytest.mark.parametrize("flops", ["1" + "0" * 400, "[" * 100_000 + "]" * 100_000, "Infinity", "-5"],
                         ids=["400 digits", "100,000 deep", "Infinity", "negative"])
def test_an_unreadable_flops_file_in_a_folder_of_traces_is_one_line(tmp_path, flops):
    """Class: OverflowError / RecursionError at pipeline.agent_flops (flops.json beside the traces)."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    minimal.write(minimal.steps_trace(4), folder / "t.json")
    (folder / "flops.json").write_text(f'{{"flops_per_step": {flops}}}')
    rc, _, err = analyze(folder)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "flops.json: unreadable FLOPs file" in err


@pytest.mark.parametrize("name", ["manifest.json", "env.json", "flops.json"])
def test_a_run_directory_json_file_nested_100000_deep_is_one_line(tmp_path, name):
    """Class: RecursionError at rundir.read_json."""
    run = tmp_path / "run"
    shutil.copytree(RUN_SEED, run)
    (run / name).write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    rc, _, err = analyze(run)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("not readable JSON (nested too deeply)") or "unreadable FLOPs file" in err


@pytest.mark.parametrize("dims", [b'{"0": [64, 128], "1": [128, 32]}', b'7', b'"x"'], ids=["object", "number", "string"])
def test_gemm_whose_input_dims_are_not_a_list_is_not_counted(dims):
    """Class: KeyError at shape_flops.matmul_flops (`Input Dims` an object)."""
    assert op_flops("aten::mm", dims, None, None) is None
    assert op_flops("aten::linear", b'{"0": [4, 8], "1": [16, 8]}', None, None) is None


def test_gemm_with_a_number_among_its_shapes_checks_up_with_the_roofline(tmp_path):
    """Class: TypeError at hardware_text.roofline_rows (a float among `Input Dims`, listed as a shape)."""
    counted = op_flops("aten::addmm", b"[[32], [64, 128], [128, 32], 1.5, 1]", None, None)
    assert counted.flops == 2 * 64 * 128 * 32 and counted.shapes == [[32], [64, 128], [128, 32]]
    trace = minimal.write(minimal.steps_trace(4, gemm={"Input Dims": [[64, 128], [128, 32], 2.5],
                                                       "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}),
                          tmp_path / "t.json")
    rc, out, _ = analyze(trace, "--gpu", "H200-SXM", *outputs(tmp_path))
    assert rc == 0
    assert "64x128, 128x32" in (tmp_path / "r.md").read_text()


def test_a_gemm_whose_other_input_is_no_tensor_shape_checks_up_through_the_document_types(tmp_path):
    """Class: msgspec.ValidationError at document.trace_part (an input after the operands holding a string and a
    float: the roofline lists it as recorded, and the document's type must take it)."""
    trace = minimal.write(minimal.steps_trace(4, gemm={"Input Dims": [[64, 128], [128, 32], ["a", 1.5]],
                                                       "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}),
                          tmp_path / "t.json")
    rc, _, err = analyze(trace, "--gpu", "H200-SXM", *outputs(tmp_path))
    assert rc == 0, err
    assert "64x128, 128x32, ax1.5" in (tmp_path / "r.md").read_text()
    assert read_report(tmp_path / "r.json")["roofline"]["ops"][0]["shapes"] == [[64, 128], [128, 32], ["a", 1.5]]


def test_a_fix_whose_saving_is_not_finite_is_shown_without_one(tmp_path):
    """Class: TypeError at terminal._fixes / html._fixes (a saving_ms the report holds as None: not finite)."""
    import msgspec
    from rich.console import Console

    from gpucheckup.report.pages import html, markdown
    from gpucheckup.report.text import terminal

    trace = minimal.write(minimal.steps_trace(8, sync=True), tmp_path / "t.json")
    rc, _, _ = analyze(trace, "--json", tmp_path / "r.json")
    report = read_report(tmp_path / "r.json")
    assert rc == 0 and report["fixes"]
    for fx in report["fixes"]:
        fx["saving_ms"] = None
        fx["predicted"] = None  # and no replayed prediction: nothing in ms/step to print
    console = Console(file=io.StringIO(), width=120)
    fixes = msgspec.convert(report["fixes"], list[Fix])  # as the renderers read them: the document's type
    console.print(terminal._fixes(fixes))
    assert "ms/step" not in console.file.getvalue() and report["fixes"][0]["action"][:20] in console.file.getvalue()
    assert "ms/step" not in html._fixes(fixes)
    text = markdown.render([(None, report)])
    row = next(ln for ln in text.splitlines() if ln.startswith("| 1 |"))
    assert report["fixes"][0]["action"][:20] in row and "| not replayed |" in row and "ms/step" not in row


OLD_TENSOR_CORE = re.compile(r"nvjet|tensorop|wgmma|hmma|gmma|xmma(?!.*ffma)|s16816|s1688", re.I)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(["xmma", "XMMA", "ffma", "FfMa", "nvjet", "hmma", "gmma", "s1688", "s16816",
                                 "tensorop", "sgemm", "_", "x", "mma", "ff", "ma", "wg"]), max_size=12).map("".join))
def test_is_tensor_core_by_substrings_equals_the_old_regex(name):
    """Class: `xmma(?!.*ffma)` backtracked quadratically (32 KB name: 0.06 s); the substring tests say the same."""
    from gpucheckup.analysis.flops.gemm_dtype import is_tensor_core

    assert is_tensor_core(name) == bool(OLD_TENSOR_CORE.search(name))


def test_is_tensor_core_of_a_million_character_name():
    from gpucheckup.analysis.flops.gemm_dtype import is_tensor_core

    with hang_bound(2):  # the old regex: ~1,000 s at this length (quadratic)
        assert is_tensor_core("xmma" * 250_000) and not is_tensor_core("xmma" * 250_000 + "ffma")


def _names_threads_devices_trace(n: int) -> dict:
    """n one-kernel steps whose launches each have their own runtime-call name and thread, on 50 devices."""
    doc = minimal.steps_trace(n)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            i = e["args"]["correlation"]
            e["name"], e["tid"], e["dur"] = f"cudaLaunchKernel_{i % (n // 2)}", 100 + i, 1.0 + i % 7
        elif e.get("cat") == "kernel":
            e["args"]["device"] = e["pid"] = e["args"]["correlation"] % 50
    return doc


def test_many_call_names_threads_and_devices_in_linear_time(tmp_path):
    """Class: api_health took a median per call name and attribute_gaps a mask per device and per thread
    (names x calls, threads x host events: 8,000 steps so made took 3 min, now 13 s on the shared machine)."""
    from gpucheckup.analysis.checkup import analyze as analyze_trace

    doc = _names_threads_devices_trace(3000)
    path = minimal.write(doc, tmp_path / "t.json")
    with hang_bound():
        a = analyze_trace(read_trace(path))
    durs: dict[str, list[float]] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            durs.setdefault(e["name"], []).append(e["dur"])
    assert len(a.api.calls) == len(durs) == 1500
    for name, d in durs.items():  # independently: count, median and total of each name's calls
        c = a.api.calls[name]
        assert (c.count, c.median_us, c.total_ms) == pytest.approx((len(d), float(np.median(d)), sum(d) / 1000))
    assert a.causes.time.shape == (len(a.timeline.gaps), a.causes.time.shape[1])
    assert np.all(a.causes.time.sum(axis=1) == pytest.approx(a.timeline.gaps.dur))  # every gap's time split
    assert len({tuple(t) for t in a.causes.thread}) > 1000  # the launch's thread per gap


@pytest.mark.parametrize("args", [["ncu-cmd", ROOT / "tests/data/h200/sync_bound/trace.json.gz"], ["demo"]],
                         ids=["ncu-cmd", "demo"])
def test_stdout_closed_by_its_reader_exits_quietly(args):
    """Class: `gpucheckup ... | head` closed stdout: BrokenPipeError was an "internal error", exit 70."""
    import os
    import subprocess

    r, w = os.pipe()
    os.close(r)  # the reader went away before the first write
    p = subprocess.run([sys.executable, "-m", "gpucheckup", *map(str, args)], stdout=w, stderr=subprocess.PIPE,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    os.close(w)
    assert p.returncode == 1
    assert b"error" not in p.stderr and b"Traceback" not in p.stderr and b"Exception ignored" not in p.stderr


@pytest.mark.parametrize("field", ["sentence", "verdict", "main_states_pct", "samples"])
@pytest.mark.parametrize("value", [None, 7, "x\x1b[2J", [1], {"a": None}], ids=["null", "int", "escape", "list", "object"])
def test_an_attach_record_with_a_field_of_the_wrong_type_checks_up_or_is_one_line(tmp_path, field, value):
    """Class: AttributeError at terminal_run.render_run (attach.json's `sentence` null, printed as the coarse verdict)."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "fuzz" / "corpus" / "runs" / "20261129-110024-attach-653", run)
    doc = json.loads((run / "attach.json").read_text())
    doc[field] = value
    (run / "attach.json").write_text(json.dumps(doc))
    rc, out, err = analyze(run)
    assert (rc == 0 and "\x1b" not in out) or (rc == 2 and len(err.strip().splitlines()) == 1)


@pytest.mark.parametrize("state", ["inf", "", "x\x1b[2J", "dataloader "])
def test_an_unknown_main_state_in_samples_csv_is_read_as_unknown(tmp_path, state):
    """Class: KeyError at coarse.coarse_verdict (an older attach run's samples.csv with a main_state it does not know)."""
    from gpucheckup.diagnosis.coarse import coarse_verdict

    v = coarse_verdict([state, state, "dataloader"], [0.0, 0.0, 0.0])
    assert v.verdict == "unknown" and v.main_states_pct == {"unknown": pytest.approx(200 / 3), "dataloader": pytest.approx(100 / 3)}
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "h200" / "runs" / "20261129-110050-attach-763", run)
    lines = (run / "samples.csv").read_text().splitlines()
    if "main_state" not in lines[0].split(","):
        pytest.skip("this run directory stores main_stack, not main_state")
    col = lines[0].split(",").index("main_state")
    rows = [ln.split(",") for ln in lines[1:]]
    for r in rows:
        r[col] = state.replace(",", "")
    (run / "samples.csv").write_text("\n".join([lines[0], *(",".join(r) for r in rows)]) + "\n")
    rc, out, err = analyze(run)
    assert rc == 0 or (rc == 2 and len(err.strip().splitlines()) == 1)


def test_invalid_utf8_in_the_last_events_is_one_line(tmp_path):
    """Class: DecodeError at reader._decode_events (bad UTF-8 in a string of the last chunk: skipping the array
    to find its end does not check UTF-8, decoding it does)."""
    doc = minimal.steps_trace(4)
    doc["traceEvents"][-1]["name"] = "PLACEHOLDER"
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(doc).encode().replace(b"PLACEHOLDER", b"k\xff\xfek"))
    rc, _, err = analyze(path)
    assert rc == 2 and err.strip() == (f"gpucheckup: error: {path}: not valid JSON (Invalid UTF-8 encoded string); "
                                       "the trace may be truncated or corrupt")


@pytest.mark.parametrize("flops", [["1e999"], [1e308], [1e308, 1e308], [-5.0]],
                         ids=["1e999 (read as inf)", "1e308 (median overflows)", "sum past 1.8e308", "negative"])
def test_flop_annotations_that_are_not_a_finite_count_are_not_used(tmp_path, flops):
    """Class: TypeError at terminal_mfu.render_hardware (a None FLOPs estimate: annotations summing to inf)."""
    doc = minimal.steps_trace(4, gemm={"Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]})
    ops = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    for e in ops:
        e["args"]["flops"] = flops[0]
    for e in ops[: len(flops) - 1]:  # a second annotated op beside the first, in the same step
        doc["traceEvents"].append({**e, "ts": e["ts"] + 20, "dur": 0.1, "args": {"flops": flops[1]}})
    trace = minimal.write(json.dumps(doc).replace('"1e999"', "1e999"), tmp_path / "t.json")
    rc, out, _ = analyze(trace, "--peak-tflops", "1e308", "--json", tmp_path / "r.json")
    mfu = read_report(tmp_path / "r.json")["mfu"]
    assert rc == 0 and "annotations" not in mfu["estimates"] and mfu["source"] == "shapes"
    assert mfu["flops_per_step"] == 2 * 64 * 128 * 32


def test_malformed_json_in_the_last_chunk_is_cut_a_bounded_number_of_times(tmp_path, monkeypatch):
    """Class: hang (17 s, a 90 KB gzip file: many one-kernel steps and a damaged byte): the reader's last chunk
    tried every event boundary as a cut, each try decoding the whole chunk again (quadratic)."""
    from gpucheckup.trace import chunks

    text = json.dumps(minimal.steps_trace(6000))
    bad = len(text) - 300_000  # inside the last chunk, before the boundaries tried near the end (256 KB)
    bad = text.index('"cat"', bad)
    path = minimal.write(text[:bad] + "#" + text[bad + 1:], tmp_path / "t.json")
    tries = []
    real_try = chunks.EventChunks._try
    monkeypatch.setattr(chunks.EventChunks, "_try", lambda self, m, consume: tries.append(1) or real_try(self, m, consume))
    rc, _, err = analyze(path)
    assert rc == 2 and "not valid JSON (JSON is malformed" in err
    assert len(tries) <= chunks.CUT_TRIES * (len(text) // chunks.CHUNK_BYTES + 2), len(tries)


@pytest.mark.parametrize("value", ["1.7e308", "-1", "1e12"])
def test_a_run_start_out_of_range_is_one_line(tmp_path, value):
    """Class: TypeError at lines.event_line (a manifest's started_epoch_s of 1.7e308: every event at -inf ms)."""
    run = tmp_path / "run"
    shutil.copytree(RUN_SEED, run)
    text = (run / "manifest.json").read_text()
    (run / "manifest.json").write_text(re.sub(r'"started_epoch_s": [^,}]+', f'"started_epoch_s": {value}', text))
    rc, _, err = analyze(run)
    assert rc == 2 and err.strip() == (f"gpucheckup: error: {run / 'manifest.json'}: field 'started_epoch_s' is "
                                       f"{float(value) if '.' in value or 'e' in value else int(value)!r}, "
                                       "out of range (0 to 8.58993e+09 s since 1970)")


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from([0, 1, 2**40, -(2**40), 2**62])), max_size=50))
def test_groups_by_one_sort_equal_a_mask_per_key(pairs):
    """groups.by_key: each key's positions as a mask finds them; pair_ids: one id per distinct (pid, tid),
    pairs that a packed pid * 2^32 + tid would collide told apart."""
    from gpucheckup.analysis.groups import by_key, pair_ids

    a = np.array([p for p, _ in pairs], dtype=np.int64)
    b = np.array([t for _, t in pairs], dtype=np.int64)
    groups = by_key(a)
    assert list(groups) == sorted(set(a.tolist()))
    assert all(np.array_equal(groups[k], np.flatnonzero(a == k)) for k in groups)
    ids = pair_ids(a, b)
    for i in range(len(pairs)):
        assert np.array_equal(ids == ids[i], (a == a[i]) & (b == b[i]))


def test_cpu_ops_of_many_names_and_threads_in_linear_time(tmp_path):
    """Class: cpu_profile took a mask per thread and per operator name (threads x ops, names x ops); the devices
    of communication, copies and sampled causes, and shape_flops' threads likewise: now one sort each."""
    from gpucheckup.analysis.one_trace.host.cpu_profile import cpu_profile

    n = 20_000
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op_{i % (n // 2)}", "pid": 1, "tid": i % (n // 4),
           "ts": 10.0 * i, "dur": 1.0 + i % 3} for i in range(n)]
    path = minimal.write({"schemaVersion": 1, "traceEvents": ev}, tmp_path / "t.json")
    with hang_bound():
        p = cpu_profile(read_trace(path))
    assert p.ops_count == n
    by_name: dict[str, list[float]] = {}
    for e in ev:
        by_name.setdefault(e["name"], []).append(e["dur"])
    top = p.top_ops[0]  # independently: the name with the most self time (no nesting: self = duration)
    assert (top.name, top.count) == (max(by_name, key=lambda k: (sum(by_name[k]), -int(k.split("_")[1]))), 2)
    assert top.self_ms == pytest.approx(max(sum(d) for d in by_name.values()) / 1000)
    assert sum(t.ops for t in p.threads) == 8 * 4  # the eight busiest of 5,000 threads, four ops each


def _gemms_inside_one(n: int, nested: bool) -> dict:
    """Two steps; n aten::mm ops of 2x3 @ 3x4 side by side inside one aten::mm whose shapes cannot
    be read, or n such unreadable ones each inside the one before and one readable innermost (2*2*3*4 = 48 FLOPs)."""
    doc = minimal.steps_trace(2)
    mm = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1}
    good = {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}
    bad = {"Input Dims": [[], []], "Input type": ["float", "float"]}
    if nested:
        doc["traceEvents"] += [{**mm, "ts": 1001.0 + i * 0.01, "dur": 80.0 - i * 0.02, "args": bad} for i in range(n)]
        doc["traceEvents"].append({**mm, "ts": 1001.0 + n * 0.01, "dur": 0.001, "args": good})
    else:
        doc["traceEvents"].append({**mm, "ts": 1000.5, "dur": 85.0, "args": bad})
        doc["traceEvents"] += [{**mm, "ts": 1001.0 + i * 0.004, "dur": 0.003, "args": good} for i in range(n)]
    return doc


@pytest.mark.parametrize("n, nested", [(1500, True), (20_000, False)], ids=["1500-deep", "20000-wide"])
def test_gemms_inside_a_gemm_whose_shapes_cannot_be_read(tmp_path, n, nested):
    """Class: shape_flops counted the ops inside an op whose shapes it cannot read by recursion (1,500 nested:
    RecursionError) and found each one's members by a scan of all of them (20,000 inside one: 28 s of CPU)."""
    rc, _, err = analyze(minimal.write(_gemms_inside_one(n, nested), tmp_path / "t.json"), "--quiet",
                         "--json", tmp_path / "r.json")
    assert rc == 0, err
    mfu = read_report(tmp_path / "r.json")["mfu"]
    counted = 1 if nested else n  # the innermost readable op, or every one inside the unreadable one
    assert mfu["shape_flops"]["ops_counted"] == counted
    assert mfu["shape_flops"]["per_step"][0] == 48 * counted  # all in the first step


# ---- found by the 100,000-case run over c34e8e8 (docs/reliability.md) ----

def test_ranks_without_step_marks_and_a_thread_id_of_2_40(tmp_path):
    """Fuzz case 25092 (seed 200): two ranks, ProfilerStep marks dropped, a tid of 2**40: the straggler's
    activity took its step thread as a bincount over thread ids (8 TiB: MemoryError); now the thread with
    the most events."""
    src = ROOT / "tests" / "data" / "fuzz" / "ranks_tid_2_40"
    tids = {e.get("tid") for e in json.loads((src / "rank0.json").read_text())["traceEvents"]}
    assert 2**40 in tids  # the input still holds what made it crash
    rc, _, err = analyze(src, "--quiet")
    assert rc == 0, err


@pytest.mark.parametrize("workers", ["4", True, 10**30, -3, [4]])
def test_dataloader_workers_that_are_not_a_count_in_env_json(tmp_path, workers):
    """Fuzz case 39425 (seed 200): env.json's num_workers a string: `workers <= cores` compared str with
    float (TypeError); a value that is not a count (0..10**6) is now no workers at all."""
    run = tmp_path / "run"
    shutil.copytree(RUN_SEED, run)
    env = json.loads((run / "env.json").read_text())
    env["dataloaders"][0]["num_workers"] = workers
    (run / "env.json").write_text(json.dumps(env))
    rc, out, err = analyze(run, "--json", tmp_path / "r.json")
    assert rc == 0, err
    loaders = read_report(tmp_path / "r.json")
    assert "workers_exceed_cores" not in json.dumps(loaders)

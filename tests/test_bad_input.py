"""Bad input: a one-line error and a non-zero exit from the real command, never a traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import trace_path, write_trace, read_report


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=120)


def assert_one_line_error(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("gpucheckup: error:")
    for w in words:
        assert w in lines[0], lines[0]


def test_truncated_gzip(tmp_path):
    data = trace_path("moe_seed").read_bytes()
    bad = tmp_path / "trunc.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    assert_one_line_error(run_cli("analyze", str(bad)), "truncated or corrupt")


def test_truncated_json(tmp_path):
    raw = gzip.decompress(trace_path("moe_seed").read_bytes())
    bad = tmp_path / "trunc.json"
    bad.write_bytes(raw[: len(raw) // 3])
    assert_one_line_error(run_cli("analyze", str(bad)), "not valid JSON")


def test_corrupt_bytes(tmp_path):
    bad = tmp_path / "noise.json"
    bad.write_bytes(b"\x00\xff{garbage")
    assert_one_line_error(run_cli("analyze", str(bad)), "not valid JSON")


def test_empty_file(tmp_path):
    bad = tmp_path / "empty.json"
    bad.write_bytes(b"")
    assert_one_line_error(run_cli("analyze", str(bad)), "empty")


def test_gz_that_is_not_gzip(tmp_path):
    bad = tmp_path / "plain.json.gz"
    bad.write_text(json.dumps({"traceEvents": []}))
    assert_one_line_error(run_cli("analyze", str(bad)), "not gzip")


def test_json_that_is_not_a_trace(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model": "resnet", "lr": 0.1}))
    assert_one_line_error(run_cli("analyze", str(bad)), "no `traceEvents`")


def test_json_array_is_not_a_trace(tmp_path):
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2, 3]")
    assert_one_line_error(run_cli("analyze", str(bad)), "not a trace")


def test_empty_trace_events(tmp_path):
    bad = write_trace(tmp_path / "empty_events.json", [])
    assert_one_line_error(run_cli("analyze", str(bad)), "no profiler events")


def test_trace_without_device_work_or_cpu_operators(tmp_path):
    """A trace with CPU operators gets the CPU-side check-up (tests/test_hta_traces.py); with neither device
    work nor CPU operators, one line names both."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0}]
    bad = write_trace(tmp_path / "cpu.json", events)
    assert_one_line_error(run_cli("analyze", str(bad)), "no device activity")
    assert "no CPU operators" in run_cli("analyze", str(bad)).stderr


def test_unknown_schema_version(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 1.0}]
    bad = write_trace(tmp_path / "future.json", events, schemaVersion=99)
    assert_one_line_error(run_cli("analyze", str(bad)), "schemaVersion 99")


def test_missing_file():
    assert_one_line_error(run_cli("analyze", "/nonexistent/trace.json"), "no such file")


def test_folder_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert_one_line_error(run_cli("analyze", str(tmp_path)), "no trace files")


def kernel(ts, dur, corr, name="k"):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 3.0,
            "args": {"correlation": corr}}


def test_absurd_durations_are_dropped_with_a_warning(tmp_path):
    events = [launch(0, 1), kernel(5, 10, 1), launch(20, 2), kernel(25, 10, 2),
              kernel(40, -5, 3), kernel(50, 1e13, 4), kernel(60, 1e300, 5)]
    path = write_trace(tmp_path / "absurd.json", events)
    res = run_cli("analyze", str(path), "--json", str(tmp_path / "out.json"))
    assert res.returncode == 0, res.stderr
    out = read_report(tmp_path / "out.json")
    assert out["kernels"]["count"] == 2
    assert any("3 events with a negative, non-finite or over-a-day duration" in n for n in out["notes"])


def test_nan_literal_is_invalid_json(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": NaN, "dur": 1}]}')
    assert_one_line_error(run_cli("analyze", str(path)), "not valid JSON")


def test_fields_of_unexpected_types_are_dropped_with_a_warning(tmp_path):
    events = [launch(0, 1), kernel(5, 10, 1), launch(20, 2), kernel(25, 10, 2),
              {"ph": "X", "cat": "kernel", "name": "bad", "pid": 0, "tid": 7, "ts": "soon", "dur": 1.0},
              {"ph": "X", "cat": "kernel", "name": ["not", "a", "name"], "pid": 0, "tid": 7, "ts": 30, "dur": 1.0}]
    path = write_trace(tmp_path / "types.json", events)
    res = run_cli("analyze", str(path), "--json", str(tmp_path / "out.json"))
    assert res.returncode == 0, res.stderr
    out = read_report(tmp_path / "out.json")
    assert out["kernels"]["count"] == 2
    assert any("2 events with fields of unexpected types" in n for n in out["notes"])


def test_unknown_fields_are_ignored(tmp_path):
    events = [dict(launch(0, 1), extra={"x": 1}), dict(kernel(5, 10, 1), newField=[1, 2]), launch(20, 2),
              kernel(25, 10, 2)]
    path = write_trace(tmp_path / "unknown.json", events, someNewTopLevelKey={"a": 1})
    res = run_cli("analyze", str(path), "--json", str(tmp_path / "out.json"))
    assert res.returncode == 0, res.stderr
    assert read_report(tmp_path / "out.json")["kernels"]["count"] == 2


@pytest.mark.parametrize("content, why", [
    (b"{}", "not a PyTorch profiler trace (no `traceEvents` list)"),
    (b'{"traceEvents": {}}', "`traceEvents` is a JSON dict, expected a list"),
    (b'{"traceEvents": "x"}', "`traceEvents` is a JSON str, expected a list"),
])
def test_wrong_shapes(tmp_path, content, why):
    bad = tmp_path / "shape.json"
    bad.write_bytes(content)
    res = run_cli("analyze", str(bad))
    # exit 2 with one line that names the file and what is wrong with it (docs/cli.md: bad input)
    assert res.returncode == 2 and res.stderr.strip() == f"gpucheckup: error: {bad}: {why}", res.stderr


def test_folder_with_one_corrupt_rank_keeps_the_good_one(tmp_path):
    import shutil

    shutil.copy(trace_path("moe_seed"), tmp_path / "trace_rank0.json.gz")
    data = trace_path("moe_seed").read_bytes()
    (tmp_path / "trace_rank1.json.gz").write_bytes(data[: len(data) // 2])
    out = tmp_path / "r.json"
    res = run_cli("analyze", str(tmp_path), "--json", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    report = read_report(out)
    assert report["verdict"]["primary"] == "gpu_bound"
    assert any("skipped a trace of this folder" in n and "trace_rank1.json.gz" in n for n in report["notes"])


def test_folder_where_every_trace_is_bad(tmp_path):
    (tmp_path / "a.json").write_text('{"traceEvents": [')
    (tmp_path / "b.json").write_text('{"traceEvents": [')
    assert_one_line_error(run_cli("analyze", str(tmp_path)), "none of its 2 traces")


def test_gpu_work_outside_the_steps(tmp_path):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 10,
               "args": {"device": 0, "stream": 7}}]
    assert_one_line_error(run_cli("analyze", str(write_trace(tmp_path / "outside.json", events))),
                          "no kernel, copy or memset runs inside")

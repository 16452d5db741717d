"""Small synthetic traces for the regression tests of the classes the fuzzer found: each builds the
minimal input of one class (a valid Kineto trace with one thing wrong or extreme)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

DEVICE = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9, "computeMinor": 0,
          "numSms": 132}


def steps_trace(n_steps: int, sync: bool = False, kernel_name: str = "k", step_us: float = 100.0,
                gemm: dict | None = None) -> dict:
    """`n_steps` ProfilerSteps of one launch and one kernel each (optionally a stream sync in each, or a GEMM op
    with the given args around the launch)."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    for i in range(n_steps):
        t = 1000.0 + i * step_us
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t,
                   "dur": step_us * 0.9})
        if gemm is not None:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 0.5,
                       "dur": 8.0, "args": {"External id": i + 1, **gemm}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1,
                   "dur": 5.0, "args": {"correlation": i + 1, "External id": i + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": kernel_name, "pid": 0, "tid": 7, "ts": t + 10,
                   "dur": step_us * 0.2, "args": {"correlation": i + 1, "External id": i + 1, "device": 0,
                                                  "stream": 7}})
        if sync:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": t + 6,
                       "dur": step_us * 0.5})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                       "ts": t + 7, "dur": step_us * 0.3, "args": {"correlation": n_steps + i + 1}})
    return {"schemaVersion": 1, "deviceProperties": [dict(DEVICE)], "traceEvents": ev}


def write(doc: dict | bytes | str, path: Path) -> Path:
    """Write a trace (a document, or its JSON text) as .json or .json.gz by the name."""
    data = doc if isinstance(doc, bytes) else (doc if isinstance(doc, str) else json.dumps(doc)).encode()
    path.write_bytes(gzip.compress(data, 1, mtime=0) if path.name.endswith(".gz") else data)
    return path

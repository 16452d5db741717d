"""`gpucheckup ab` end to end on this CPU: real processes, the agent's steps.csv, interleaved sides."""

from __future__ import annotations

import json
import sys

import pytest

from gpucheckup.checkup import ab
from gpucheckup.cli import main

EX = [sys.executable, "-m", "gpucheckup.examples.launch", "--steps", "10"]


def _ab(tmp_path, *args):
    out = tmp_path / "ab.json"
    rc = main(["ab", "--warmup", "3", "--measure", "7", "--json", str(out), *args])
    assert rc == 0
    return json.loads(out.read_text())


def test_identical_commands_show_no_difference(tmp_path):
    """A 95% interval calls identical commands different in about one run of twenty (more on a machine whose load
    drifts between rounds, as CI's 2-core runner does): of two runs at least one must read `same`, which fails if
    false differences were the rule (a wrong interval), not at the interval's own rate."""
    pytest.importorskip("torch")
    runs = []
    for attempt in range(2):
        (tmp_path / str(attempt)).mkdir()
        runs.append(_ab(tmp_path / str(attempt), "--rounds", "5", "--", *EX, "--", *EX))
        if runs[-1]["verdict"] == "same":
            break
    r = runs[-1]
    assert r["kind"] == "ab" and isinstance(r["schema_version"], int)  # the versioned document (docs/schema.md)
    assert r["verdict"] == "same", [x["sentence"] for x in runs]
    assert r["sentence"].startswith("No difference measured")
    for side in ("a", "b"):
        assert len(r[side]["round_ms"]) == 5 and r[side]["steps"] == 5 * 7  # warm-up dropped, 7 kept each


def test_fewer_steps_than_measure_asked_are_said(tmp_path):
    """The job runs 10 steps; the first has no time, 3 are warm-up: 7 measured per round, not the 20 asked."""
    pytest.importorskip("torch")
    out = tmp_path / "ab.json"
    assert main(["ab", "--rounds", "2", "--warmup", "3", "--measure", "20", "--json", str(out),
                 "--", *EX, "--", *EX]) == 0
    r = json.loads(out.read_text())
    assert r["a"]["steps"] == r["b"]["steps"] == 2 * 7
    for side in ("A", "B"):
        note = f"{side} measured 7 steps in 2 of its 2 rounds, not the 20 --measure asked"
        assert note in r["sentence"], r["sentence"]
        assert any(n.startswith(note) for n in r["notes"])


PACED = """
import sys, time, torch
layer = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    time.sleep(float(sys.argv[2]) / 1000)  # a known step time that CPU contention barely changes
    layer(torch.ones(1, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_the_faster_command_is_named(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "paced.py"
    script.write_text(PACED)
    slow, fast = [sys.executable, str(script), "10", "150"], [sys.executable, str(script), "10", "3"]
    r = _ab(tmp_path, "--rounds", "2", "--", *slow, "--", *fast)
    assert r["verdict"] == "faster", r["sentence"]
    assert r["b"]["median_ms"] < r["a"]["median_ms"]
    assert r["a"]["median_ms"] >= 150  # each slow step sleeps 150 ms
    assert r["sentence"].startswith("B is faster than A by")


def test_sides_from_commands_and_vary():
    a, b = ab.sides_from(["--", "python", "x.py", "--", "python", "y.py", "--fast"], None)
    assert (a.cmd, b.cmd) == (["python", "x.py"], ["python", "y.py", "--fast"])
    a, b = ab.sides_from(["--", "python", "x.py"], "OMP_NUM_THREADS=1,2")
    assert (a.env, b.env, a.cmd) == ({"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2"}, ["python", "x.py"])


@pytest.mark.parametrize("args,words", [
    (["--", "python", "x.py"], "give two commands"),
    (["--vary", "X=1", "--", "python", "x.py"], "--vary takes ENV=v1,v2"),
    (["--rounds", "1", "--", "true", "--", "true"], "--rounds must be"),
    (["--", "true", "--", "true"], "no step times"),
    (["--", "false", "--", "true"], "exited with status 1"),
])
def test_bad_input_is_one_line(args, words, capsys):
    assert main(["ab", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


# A side as the agent would record it, without a GPU: steps.csv holds the host-side intervals, gpu-steps.csv (when
# given) the GPU's, written into the run directory ab made for the process. A host that queues work without waiting
# returns from its steps every HOST ms while the GPU takes GPU ms per step.
FAKE = """
import os, sys
from pathlib import Path
host, gpu, steps = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
run = Path(os.environ["GPUCHECKUP_RUN_DIR"])
jitter = [1.0, 1.01, 0.99, 1.02, 0.98]
t, rows, gpu_rows = 1000.0, ["step,t_end_s,ms,phase"], ["step,gpu_ms"]
for n in range(1, steps + 1):
    h = host * jitter[n % 5]
    t += h / 1000
    rows.append(f"{n},{t:.6f},{'' if n == 1 else f'{h:.4f}'},")
    if n > 1:
        gpu_rows.append(f"{n},{gpu * jitter[(n + 2) % 5]:.4f}")
(run / "steps.csv").write_text("\\n".join(rows) + "\\n")
if gpu > 0:
    (run / "gpu-steps.csv").write_text("\\n".join(gpu_rows) + "\\n")
"""


def _fake(tmp_path, host, gpu, steps=12):
    script = tmp_path / "fake_side.py"
    script.write_text(FAKE)
    return [sys.executable, str(script), str(host), str(gpu), str(steps)]


def test_a_side_that_runs_ahead_of_its_gpu_is_timed_on_the_gpu(tmp_path):
    # B queues its steps every 1 ms while its GPU needs 10 ms, as A's does: on the host B looks 90% faster
    r = _ab(tmp_path, "--rounds", "2", "--", *_fake(tmp_path, 10, 10), "--", *_fake(tmp_path, 1, 10))
    assert r["clock"] == "gpu"
    assert r["verdict"] == "same", r["sentence"]
    assert [x["label"] for x in r["ran_ahead"]] == ["B"]
    assert abs(r["b"]["median_ms"] - 10) < 0.3 and abs(r["a"]["median_ms"] - 10) < 0.3
    assert abs(r["ran_ahead"][0]["host_ms"] - 1) < 0.05 and r["ran_ahead"][0]["share"] > 0.85
    assert "B ran ahead of its GPU" in r["sentence"] and "on the GPU" in r["sentence"]


def test_a_real_gain_of_a_side_that_runs_ahead_is_measured_on_the_gpu(tmp_path):
    # B runs ahead, and its GPU does a step in 5 ms against A's 10: 50% faster on the GPU (90% on the host)
    r = _ab(tmp_path, "--rounds", "2", "--", *_fake(tmp_path, 10, 10), "--", *_fake(tmp_path, 1, 5))
    assert r["clock"] == "gpu" and r["verdict"] == "faster", r["sentence"]
    assert -52 < r["change_pct"] < -48


def test_sides_that_keep_pace_with_their_gpu_are_timed_on_the_host(tmp_path):
    # the GPU is as fast or faster than the host (the host waits, or the GPU waits for the host): host times
    r = _ab(tmp_path, "--rounds", "2", "--", *_fake(tmp_path, 10, 9.5), "--", *_fake(tmp_path, 5, 2))
    assert r["clock"] == "host" and r["ran_ahead"] == [], r["sentence"]
    assert -52 < r["change_pct"] < -48 and r["verdict"] == "faster"


def test_a_side_ahead_of_its_gpu_against_one_without_gpu_times_is_refused(tmp_path, capsys):
    rc = main(["ab", "--rounds", "2", "--warmup", "3", "--measure", "7", "--",
               *_fake(tmp_path, 1, 10), "--", *_fake(tmp_path, 10, 0)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "A ran ahead of its GPU" in err and "B has no GPU step times" in err


def test_the_agent_in_an_ab_process_writes_no_gpu_times_without_cuda(tmp_path):
    # ab turns the agent's GPU clock on; a job on the CPU has no CUDA stream to time: no file, no agent error
    pytest.importorskip("torch")
    out = tmp_path / "runs"
    assert main(["ab", "--rounds", "2", "--warmup", "3", "--measure", "5", "--out", str(out), "--",
                 *EX, "--", *EX]) == 0
    dirs = [p for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == 4 and all((d / "steps.csv").exists() and not (d / "gpu-steps.csv").exists() for d in dirs)
    assert all(json.loads((d / "agent.json").read_text()).get("errors", []) == [] for d in dirs)
    assert all("GPUCHECKUP_GPU_CLOCK" in (d / "agent.log").read_text() or "gpu_clock" in (d / "agent.log").read_text()
               for d in dirs)


def test_gpu_clock_reads_each_step_interval_once_its_events_are_done():
    # the agent's GPU clock over a stand-in for torch.cuda whose GPU finishes step n's work at `stamp` (10 ms a step,
    # 15 after step 20) and runs ten steps behind the host: events are read once done, never waited for before
    # exit; the step recorded during a graph capture is skipped, and no interval spans it
    from types import SimpleNamespace

    from gpucheckup.capture.agent import gpu_clock

    state = {"done_ms": 0.0, "capturing": False, "synced": 0, "stamp": 0.0}

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            self.t = state["stamp"]

        def query(self):
            return self.t <= state["done_ms"]

        def elapsed_time(self, other):
            return other.t - self.t

    cuda = SimpleNamespace(is_initialized=lambda: True, is_current_stream_capturing=lambda: state["capturing"],
                           Event=Event, synchronize=lambda: state.update(done_ms=1e9, synced=state["synced"] + 1))
    clock = gpu_clock.GpuClock(SimpleNamespace(cuda=cuda))
    for n in range(1, 81):
        state["stamp"] = 10.0 * n + 5.0 * max(0, n - 20)
        state["capturing"] = n == 30
        clock.mark(n)
        state["done_ms"] = state["stamp"] - 100  # ten steps behind
    assert clock.rows and state["synced"] == 0  # read while running, without waiting
    rows = [line.split(",") for line in clock.finish().splitlines()]
    assert state["synced"] == 1 and rows[0] == ["step", "gpu_ms"]
    got = {int(s): float(ms) for s, ms in rows[1:]}
    want = {n: 10.0 if n <= 20 else 15.0 for n in range(2, 81) if n not in (30, 31)}
    assert got == want

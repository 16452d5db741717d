"""Capture faults told truly (issue 11): a full disk during the trace export, a job that execs, a launcher
killed with SIGKILL, sockets of a job killed by a signal, idle clients on the control channel, bad
--pid values. Real torch jobs in real subprocesses; each test asserts the job's exit code and the
cause the manifest states. Waits are on files and sockets, never fixed sleeps."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the capture tests run real torch jobs: pip install torch==2.13.0 (CI does)")

JOBS = Path(__file__).resolve().parent / "jobs"
PY = sys.executable


def gpucheckup(*args, timeout=240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout, **kw)


def the_run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def wait_for(check, what: str, timeout: float = 120) -> None:
    end = time.time() + timeout
    while not check():
        assert time.time() < end, f"{what} did not happen in {timeout:g} s"
        time.sleep(0.05)


def step_numbers(path: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in path.read_text().splitlines()[1:]]


@pytest.fixture
def tiny_disk():
    """A 6 MB tmpfs (root only: mount)."""
    if os.geteuid() != 0:
        pytest.skip("a small tmpfs is mounted to fill a disk, which needs root")
    d = Path(tempfile.mkdtemp(prefix="gc-tinydisk-"))
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=1777", "tmpfs", str(d)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        os.rmdir(d)


def test_disk_full_during_the_trace_export_is_said_to_be_enospc(tiny_disk):
    """The audit's case: the disk runs full in the profiled window (the job's own file fills it), and is
    freed before the job ends. The manifest and the terminal name ENOSPC, not 'no profiled window'."""
    out = tiny_disk / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--steps", "2", "--no-nvml", "--",
                     PY, str(JOBS / "fill_disk.py"), "8", "3", str(tiny_disk / "filler"), "1")
    assert res.returncode == 0, res.stderr  # the job's own exit code
    assert "disk full" in res.stdout and "trained 8 steps" in res.stdout
    manifest = json.loads((the_run_dir(out) / "manifest.json").read_text())
    assert manifest["exit_code"] == 0
    why = manifest["failed"]["trace:main"]
    assert "ENOSPC (No space left on device)" in why and "no profiled window" not in why, why
    assert "ENOSPC" in res.stdout  # the terminal's check-up lists what was not captured
    assert step_numbers(the_run_dir(out) / "steps.csv") == list(range(1, 9))


def test_enospc_injected_at_the_trace_writer_is_stated(tmp_path):
    """The same fault without root: the job replaces the agent's trace writer with one that fails as a full
    disk does, after writing part of the file."""
    out = tmp_path / "runs"
    job = ("import errno, os, torch\n"
           "from gpucheckup.capture.agent import core\n"
           "def full(prof, rd, name):\n"
           "    fd = rd.open(name + '.partial', os.O_WRONLY | os.O_CREAT); os.write(fd, b'{'); os.close(fd)\n"
           "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)\n"
           "core.export_trace = full\n"
           "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
           "for _ in range(6):\n    m(torch.randn(2, 4)).sum().backward(); o.step()\n"
           "raise SystemExit(3)\n")
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--steps", "2", "--no-nvml", "--", PY, "-c", job)
    assert res.returncode == 3, res.stderr
    manifest = json.loads((the_run_dir(out) / "manifest.json").read_text())
    assert manifest["exit_code"] == 3
    assert manifest["failed"]["trace:main"] == ("failed: ENOSPC (No space left on device): traces/trace.json.gz"), \
        manifest["failed"]
    assert "ENOSPC (No space left on device)" in res.stdout


def test_disk_still_full_when_the_job_ends_is_said_and_the_manifest_is_written(tiny_disk):
    out = tiny_disk / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--steps", "2", "--no-nvml", "--no-report", "--",
                     PY, str(JOBS / "fill_disk.py"), "6", "3", str(tiny_disk / "filler"), "0")
    assert res.returncode == 0, res.stderr
    manifest = json.loads((the_run_dir(out) / "manifest.json").read_text())  # written in the reserved space
    assert manifest["exit_code"] == 0
    assert manifest["failed"]["disk"].startswith("ENOSPC: the run directory's file system has"), manifest["failed"]
    assert "ENOSPC" in manifest["failed"]["trace:main"]


def test_a_job_that_execs_keeps_counting_and_is_not_said_to_exit_uncleanly(tmp_path):
    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "20", "--steps", "3", "--no-nvml", "--no-report", "--",
                     PY, str(JOBS / "execs.py"), "9", "16")
    assert res.returncode == 0, res.stderr
    pids = {line.split()[-1] for line in res.stdout.splitlines() if line.startswith("image")}
    assert len(pids) == 1  # one process, two images
    run_dir = the_run_dir(out)
    assert step_numbers(run_dir / "steps.csv") == list(range(1, 26))  # 9 before the exec, 16 after
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["exit_code"] == 0 and "agent_exit" not in manifest["failed"], manifest["failed"]
    agent = json.loads((run_dir / "agent.json").read_text())
    assert agent["execs"] == 1 and agent["steps"] == 25
    window = [c for c in agent["captures"] if not c["attach"]]
    assert window and window[0]["status"] == "done" and window[0]["steps"] == [21, 23]  # in the second image
    assert manifest["captured"]["traces"] == ["traces/trace.json.gz"]
    assert not (Path(f"/tmp/gpucheckup-{os.getuid()}") / f"{int(next(iter(pids)))}.sock").exists()


def test_a_job_that_execs_a_program_without_the_agent_is_said_to_have_exec_d(tmp_path):
    out = tmp_path / "runs"
    job = ("import os, sys, torch\n"
           "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
           "for _ in range(3):\n    m(torch.randn(2, 4)).sum().backward(); o.step()\n"
           "os.execv('/bin/sh', ['sh', '-c', 'exit 4'])\n")
    res = gpucheckup("run", "--out", str(out), "--no-nvml", "--no-report", "--", PY, "-c", job)
    assert res.returncode == 4, res.stderr
    run_dir = the_run_dir(out)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["exit_code"] == 4
    assert manifest["failed"]["agent_exit"].startswith("the job's process (main) exec'd a program that did not "
                                                       "re-arm the agent"), manifest["failed"]
    assert step_numbers(run_dir / "steps.csv") == [1, 2, 3]  # flushed before the exec, not lost


def test_a_launcher_killed_with_sigkill_leaves_a_run_directory_that_analyze_reads(tmp_path):
    """Policy: the job is not killed with its launcher (no PR_SET_PDEATHSIG); its agent writes the manifest at
    the job's exit, saying the launcher ended first."""
    out, ready, stop = tmp_path / "runs", tmp_path / "ready", tmp_path / "stop"
    launcher = subprocess.Popen([PY, "-m", "gpucheckup", "run", "--out", str(out), "--skip", "2", "--steps", "2",
                                 "--no-nvml", "--no-report", "--", PY, str(JOBS / "until_stopped.py"), str(ready),
                                 str(stop)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(ready.exists, "the job's third step")
        job_pid = int(ready.read_text())
        launcher.kill()
        launcher.wait(timeout=60)
        assert launcher.returncode == -signal.SIGKILL
        os.kill(job_pid, 0)  # the job still runs
        stop.write_text("stop")
        manifest_path = the_run_dir(out) / "manifest.json"
        wait_for(manifest_path.exists, "the agent's manifest")
    finally:
        stop.write_text("stop")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["exit_code"] is None and manifest["pid"] == job_pid
    assert manifest["failed"]["launcher"].startswith(f"the launcher (pid {launcher.pid}) ended before the job")
    listed = {a["path"] for a in manifest["artefacts"]}
    assert {"steps.csv", "agent.json", "traces/trace.json.gz"} <= listed
    res = gpucheckup("analyze", str(the_run_dir(out)), "--quiet", "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert "the launcher" in json.dumps(report)  # read as a run: its failed entries are part of the check-up


def test_a_job_killed_by_a_signal_leaves_no_control_socket(tmp_path):
    out = tmp_path / "runs"
    job = ("import os, signal, torch\n"
           "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
           "m(torch.randn(2, 4)).sum().backward(); o.step()\n"
           "import time\n"
           "sock = f'/tmp/gpucheckup-{os.getuid()}/{os.getpid()}.sock'\n"
           "while not os.path.exists(sock): time.sleep(0.01)\n"
           "print('socket', sock, flush=True)\n"
           "os.kill(os.getpid(), signal.SIGKILL)\n")
    res = gpucheckup("run", "--out", str(out), "--no-nvml", "--no-report", "--", PY, "-c", job)
    assert res.returncode == -signal.SIGKILL, res.stderr
    sock = next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("socket"))
    assert not os.path.exists(sock)
    manifest = json.loads((the_run_dir(out) / "manifest.json").read_text())
    assert manifest["exit_signal"] == "SIGKILL"


def test_idle_clients_neither_delay_nor_block_the_control_channel(tmp_path):
    from gpucheckup.capture import control

    out, ready, stop = tmp_path / "runs", tmp_path / "ready", tmp_path / "stop"
    launcher = subprocess.Popen([PY, "-m", "gpucheckup", "run", "--out", str(out), "--skip", "1000000", "--no-nvml",
                                 "--no-report", "--",
                                 PY, str(JOBS / "until_stopped.py"), str(ready), str(stop)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    idle = []
    try:
        wait_for(ready.exists, "the job's third step")
        pid = int(ready.read_text())
        wait_for(control.socket_path(pid).exists, "the control socket")
        for _ in range(5):  # five same-user clients that connect and say nothing
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(control.socket_path(pid)))
            idle.append(s)
        # served at once, beside them: the old server read one connection at a time with a 10 s timeout
        answers = control.request(pid, {"cmd": "status"}, timeout_s=5.0)
        assert answers and answers[0]["ok"] and answers[0]["pid"] == pid
        res = gpucheckup("attach", "--pid", str(pid), "--steps", "2", "--quiet", "--timeout", "60")
        assert res.returncode == 0, (res.stdout, res.stderr)
        trace = next(line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("trace written"))
        assert "/traces/attach/" in trace and Path(trace).is_file()
    finally:
        for s in idle:
            s.close()
        stop.write_text("stop")
        launcher.communicate(timeout=120)
    assert launcher.returncode == 0


@pytest.mark.parametrize("pid", ["0", "-1", "99999999999999999999"])
def test_attach_refuses_a_pid_out_of_range_in_one_line(pid):
    res = gpucheckup("attach", f"--pid={pid}", "--duration", "1")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"gpucheckup: error: --pid must be a process id from 1 to "
                                               f"{Path('/proc/sys/kernel/pid_max').read_text().strip()}, got {pid}"]


def test_a_disk_full_from_the_start_is_blamed_on_the_disk_not_on_empty_files_or_the_job(tiny_disk):
    """Before: with the run directory's disk full when the job started, the check-up ended in 'cpu.csv: empty
    file (no header)' and the manifest said 'the job did not exit cleanly' beside exit code 0."""
    with open(tiny_disk / "filler", "wb") as f:  # all but 24 KiB of the 6 MB taken
        f.write(b"\0" * (6 * 1024 * 1024 - 24 * 1024))
    out = tiny_disk / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--steps", "2", "--no-nvml", "--",
                     PY, str(JOBS / "fill_disk.py"), "6", "99", str(tiny_disk / "filler2"), "0")
    assert res.returncode == 0, res.stderr
    assert "no check-up of" not in res.stderr and "empty file" not in res.stderr, res.stderr
    assert "Whole run" in res.stdout and "ENOSPC" in res.stdout
    manifest = json.loads((the_run_dir(out) / "manifest.json").read_text())
    assert manifest["exit_code"] == 0
    said = json.dumps(manifest["failed"])
    assert "did not exit cleanly" not in said and manifest["failed"]["disk"].startswith("ENOSPC"), said

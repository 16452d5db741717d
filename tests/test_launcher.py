"""`gpucheckup run` when things go wrong: jobs killed by uncatchable signals, bad options, a launcher that
fails part-way. Real subprocesses; no torch needed (the jobs are shells and plain Python), except where the options'
limits are checked to take effect on a small torch job."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PY = sys.executable


def gpucheckup(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout)


def the_run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def manifest_listing_every_file(run_dir: Path) -> dict:
    """The manifest, checked to list exactly the files on disk (as tests/test_capture.py checks it)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    listed = {a["path"]: a["bytes"] for a in manifest["artefacts"]}
    on_disk = {p.relative_to(run_dir).as_posix(): p.stat().st_size for p in run_dir.rglob("*")
               if p.is_file() and p.name != "manifest.json"}
    assert listed == on_disk
    assert not any(name.endswith((".part", ".tmp")) for name in on_disk), on_disk
    from gpucheckup import layout

    assert set(manifest) <= set(layout.MANIFEST_KEYS), set(manifest) - set(layout.MANIFEST_KEYS)
    assert [a["path"] for a in manifest["artefacts"] if not any(
        a["path"].startswith(prefix) for prefix, _ in layout.ARTEFACT_WHAT)] == []  # every file said what it holds
    return manifest


# ---- the job dies of a signal no process can catch --------------------------------------------------

def test_a_job_killed_by_sigkill_kills_the_launcher_with_sigkill(tmp_path):
    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--no-report", "--", "sh", "-c", "echo before; kill -9 $$")
    assert res.returncode == -signal.SIGKILL, res.stderr  # as the OOM killer's victim would end
    assert "before" in res.stdout and "internal error" not in res.stderr
    manifest = manifest_listing_every_file(the_run_dir(out))
    assert manifest["exit_signal"] == "SIGKILL" and manifest["exit_code"] is None


def test_a_job_killed_by_sigkill_still_gets_its_checkup(tmp_path):
    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--", "sh", "-c", "kill -9 $$")
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert "killed by SIGKILL" in res.stdout  # the report ran before the launcher ended itself


# ---- every option is checked before the job starts -------------------------------------------------

@pytest.mark.parametrize("option, value", [
    ("--nvml-hz", "0"), ("--nvml-hz", "-5"), ("--nvml-hz", "nan"), ("--nvml-hz", "1000"),
    ("--skip", "1"), ("--steps", "0"), ("--steps", "1001"), ("--window", "0"), ("--window-start", "-1"),
    ("--window", "inf"),
])
def test_a_bad_option_is_refused_before_the_job_starts(tmp_path, option, value):
    out, marker = tmp_path / "runs", tmp_path / "job-ran"
    res = gpucheckup("run", "--out", str(out), option, value, "--", PY, "-c",
                     f"open({str(marker)!r}, 'w').close()")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpucheckup: error: {option} must be"), res.stderr
    assert not marker.exists()  # the job never started
    assert not out.exists()  # and no run directory was left without a manifest


def test_the_option_limits_are_inclusive_and_take_effect(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "runs"
    job = Path(__file__).parent / "jobs" / "train_mlp.py"
    res = gpucheckup("run", "--out", str(out), "--no-report", "--nvml-hz", "100", "--skip", "2", "--steps", "1",
                     "--window", "0.1", "--", PY, str(job), "6")
    assert res.returncode == 0, res.stderr
    assert "trained 6 steps" in res.stdout
    run_dir = next(out.iterdir())
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["captured"]["nvml"]["hz"] == 100.0  # the sampler was started at 100 Hz (whether or not NVML answers)
    assert m["agent_settings"]["main"]["window_s"] == 0.1  # the time window's length the agent was given
    capture = m["captured"]["processes"]["main"]["captures"][0]
    assert capture["steps"] == [3, 3]  # two steps skipped, one profiled: the third
    with gzip.open(run_dir / capture["trace"], "rt") as f:
        events = json.load(f)["traceEvents"]
    assert sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X") == 1


# ---- a launcher that fails after the job started ------------------------------------------------------

def run_with_faults(tmp_path: Path, faults: str, job: str) -> subprocess.CompletedProcess:
    """`gpucheckup run -- python -c JOB` in a subprocess whose launcher has `faults` patched in first."""
    script = tmp_path / "faulty_launcher.py"
    script.write_text(textwrap.dedent(faults) + textwrap.dedent(f"""
        import sys
        from gpucheckup.cli import main
        sys.exit(main(["run", "--out", {str(tmp_path / 'runs')!r}, "--no-report", "--", {PY!r}, "-c", {job!r}]))
    """))
    return subprocess.run([PY, str(script)], capture_output=True, text=True, timeout=120)


def test_telemetry_that_cannot_start_costs_the_job_nothing(tmp_path):
    faults = """
        from gpucheckup.capture import telemetry

        def full_disk(self, path, columns, **kw):
            raise OSError(28, "No space left on device")

        telemetry.CsvSink.__init__ = full_disk
    """
    res = run_with_faults(tmp_path, faults, "import sys, time; time.sleep(0.5); print('job done'); sys.exit(3)")
    assert res.returncode == 3, res.stderr  # the job's own exit code, not the launcher's 70
    assert "job done" in res.stdout and "internal error" not in res.stderr
    manifest = manifest_listing_every_file(the_run_dir(tmp_path / "runs"))
    assert manifest["exit_code"] == 3
    assert "No space left on device" in manifest["failed"]["launcher"]
    assert manifest["failed"]["cpu"].startswith("failed to start")


def test_a_failure_finishing_the_run_directory_is_stated_in_the_manifest(tmp_path):
    faults = """
        from gpucheckup.capture import environment

        def broken(host_env, agents):
            raise RuntimeError("merge broke")

        environment.merge_agents = broken
    """
    res = run_with_faults(tmp_path, faults, "import sys; sys.exit(4)")
    assert res.returncode == 4, res.stderr
    run_dir = the_run_dir(tmp_path / "runs")
    manifest = manifest_listing_every_file(run_dir)
    assert manifest["exit_code"] == 4
    assert "merging the environment: RuntimeError: merge broke" in manifest["failed"]["launcher"]
    assert (run_dir / "env.json").is_file()  # the host's part is still written
    assert "merge broke" in res.stderr  # and the user is told, in one line
    assert len([line for line in res.stderr.splitlines() if "merge broke" in line]) == 1


def test_a_manifest_that_cannot_be_written_in_full_is_written_minimal(tmp_path):
    faults = """
        from gpucheckup.capture import launcher

        def broken(*args, **kw):
            raise RuntimeError("finish broke")

        launcher.finish_run_dir = broken
    """
    res = run_with_faults(tmp_path, faults, "import sys; sys.exit(5)")
    assert res.returncode == 5, res.stderr
    manifest = manifest_listing_every_file(the_run_dir(tmp_path / "runs"))
    assert manifest["exit_code"] == 5 and "finish broke" in manifest["failed"]["launcher"]


# ---- the manifest is written again once a capture is over (attach, inject mode) ------------------------

def test_the_inject_manifest_lists_what_the_capture_wrote(tmp_path):
    from gpucheckup.capture.attach import finish_inject_manifest
    from gpucheckup.capture.launcher import write_manifest

    run_dir = tmp_path / "attach-123"
    run_dir.mkdir()
    first = write_manifest(run_dir, {"kind": "attach-inject", "pid": 123, "started_epoch_s": 1.0, "captured": {},
                                     "failed": {}})
    assert first["artefacts"] == []
    (run_dir / "traces" / "attach").mkdir(parents=True)
    (run_dir / "traces" / "attach" / "main-1.json.gz").write_bytes(b"x" * 10)
    (run_dir / "agent.json").write_text(json.dumps({"key": "main", "pid": 123, "captures": [{"status": "done"}]}))
    (run_dir / "agent.log").write_text("one line\n")
    manifest = finish_inject_manifest(run_dir, first)
    assert manifest == json.loads((run_dir / "manifest.json").read_text())
    assert manifest_listing_every_file(run_dir)["artefacts"] == manifest["artefacts"]
    assert {a["path"] for a in manifest["artefacts"]} == {"traces/attach/main-1.json.gz", "agent.json", "agent.log"}
    assert manifest["captured"]["traces"] == ["traces/attach/main-1.json.gz"] and manifest["failed"] == {}
    assert manifest["captured"]["processes"]["main"] == {"pid": 123, "captures": [{"status": "done"}]}
    assert manifest["pid"] == 123 and manifest["ended_epoch_s"] >= 1.0


def test_an_inject_capture_without_a_trace_says_so(tmp_path):
    from gpucheckup.capture.attach import finish_inject_manifest
    from gpucheckup.capture.launcher import write_manifest

    first = write_manifest(tmp_path, {"kind": "attach-inject", "pid": 9, "started_epoch_s": 1.0})
    (tmp_path / "agent.log").write_text("ERROR could not start the profiler\n")
    manifest = finish_inject_manifest(tmp_path, first)
    assert "trace" in manifest["failed"] and [a["path"] for a in manifest["artefacts"]] == ["agent.log"]


@pytest.mark.parametrize("option, value", [("--rate", "0"), ("--rate", "nan"), ("--rate", "1000"),
                                           ("--timeout", "0"), ("--timeout", "-1")])
def test_attach_refuses_a_bad_rate_or_timeout_before_sampling(tmp_path, option, value):
    import os

    out = tmp_path / "runs"
    res = gpucheckup("attach", "--pid", str(os.getpid()), "--mode", "py-spy", "--out", str(out), option, value)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpucheckup: error: {option} must be"), res.stderr
    assert not out.exists()


def test_a_bad_mfu_option_stops_run_before_the_job(tmp_path):
    """run takes analyze's MFU options, checked with the capture options before anything starts."""
    out = tmp_path / "runs"
    marker = tmp_path / "ran"
    res = gpucheckup("run", "--out", str(out), "--params", "7e9", "--", PY, "-c", f"open({str(marker)!r}, 'w')")
    assert res.returncode == 2 and "--params needs --tokens-per-step" in res.stderr
    assert not marker.exists() and not out.exists()

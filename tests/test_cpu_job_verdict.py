"""One job, one verdict everywhere: a torchrun gloo job of 2 CPU ranks launches no kernel, so it is not
launch-bound; the job's verdict reads the same in the terminal, the JSON, the HTML, the Markdown, the Python API
and the gates.

The job (tests/jobs/ddp_train.py) makes rank 1 spin 30 ms of Python before each forward (`--slow-kind host`):
rank 0 waits for it at the all-reduce, so rank 1 is the straggler and its cause is host work between operators.
On a GPU that cause reads as launch overhead; here no rank has device activity, so the verdict is `cpu_only`
and the straggler is its reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parent / "jobs"


def cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucheckup", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def cpu_ddp_run(tmp_path_factory):
    pytest.importorskip("torch", reason="runs a real torch.distributed job")
    out = tmp_path_factory.mktemp("runs")
    res = cli("run", "--out", out, "--skip", "4", "--steps", "5", "--no-report", "--",
              sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
              JOBS / "ddp_train.py", "--width", "64", "--layers", "2", "--batch", "8", "--steps", "12",
              "--slow-rank", "1", "--slow-ms", "30", "--slow-kind", "host")
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return run


def test_a_cpu_only_ddp_job_has_one_verdict_everywhere(cpu_ddp_run, tmp_path):
    import gpucheckup

    run = cpu_ddp_run
    p = cli("analyze", run, "--json", tmp_path / "r.json", "--html", tmp_path / "r.html",
            "--markdown", tmp_path / "r.md")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["cpu_checkups"] and not doc["checkups"]  # both ranks are CPU-only traces
    assert doc["verdict"]["primary"] == "cpu_only"
    assert doc["job"]["ranks"]["straggler"] == 1  # the planted 30 ms of Python per step
    assert "straggler" in doc["verdict"]["reason"]
    assert [f["id"] for f in doc["verdict"]["findings"]] == ["straggler"]
    assert any("rank 1" in x["action"] for x in doc["fixes"])  # the job's fix comes with its verdict
    assert "Job: CPU ONLY" in p.stdout and "LAUNCH" not in p.stdout.upper().replace("-", " ").replace("_", " ")
    md = (tmp_path / "r.md").read_text()
    assert "**Verdict: CPU-ONLY**" in md and "LAUNCH" not in md.upper()
    html = re.sub(r"<[^>]+>", " ", (tmp_path / "r.html").read_text())
    assert "CPU-ONLY" in html and "LAUNCH-BOUND" not in html.upper() and "LAUNCH BOUND" not in html.upper()
    up = gpucheckup.analyze(run)
    assert up.verdict == "cpu_only" and [r.verdict for r in up.ranks] == ["cpu_only", "cpu_only"]
    assert [f.action for f in up.fixes] == [x["action"] for x in doc["fixes"]]
    assert up.report["verdict"] == doc["verdict"]  # the API's report holds the job's verdict, not rank 0's
    for table_row in doc["job"]["ranks"]["table"]:
        assert table_row["verdict"] == "cpu_only"


def test_the_gates_read_the_same_verdict(cpu_ddp_run):
    assert cli("analyze", cpu_ddp_run, "--quiet", "--fail-on", "launch_bound").returncode == 0
    p = cli("analyze", cpu_ddp_run, "--quiet", "--fail-on", "cpu_only")
    assert p.returncode == 3
    assert "gpucheckup: failed: verdict cpu_only (--fail-on)" in p.stderr.splitlines()  # the job's own line

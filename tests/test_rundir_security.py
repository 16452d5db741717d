"""A run directory only its owner controls (issue 11; docs/reliability.md, "Threat model").

The audit's attack, done by a second local user: in a shared sticky folder, another user creates
`gpucheckup-runs` before the victim does, then swaps the victim's fresh run directory for a
symbolic link into the victim's home. The attacker runs as a throwaway user made with `useradd`
(so these tests need root; they skip with the reason otherwise) in a forked child that drops to
that user's uid. Real `gpucheckup run` subprocesses; the jobs need no torch unless said.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

PY = sys.executable
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                               reason="a second local user is made with useradd, which needs root")


def gpucheckup(*args, timeout=180, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout, **kw)


def snapshot(folder: Path) -> dict:
    """Every entry under a folder (links not followed) with its content or link target."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", p.read_bytes())
        else:
            out[rel] = ("dir",)
    return out


@pytest.fixture
def attacker():
    """A throwaway local user: (uid, gid, name); removed afterwards."""
    name = f"gcattack{os.getpid() % 100000}"
    subprocess.run(["userdel", name], capture_output=True)
    res = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", name], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"useradd failed: {res.stderr.strip()}")
    import pwd

    pw = pwd.getpwnam(name)
    try:
        yield pw.pw_uid, pw.pw_gid, name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared():
    """A shared sticky folder open to everyone (as /tmp or a scratch file system), reachable by other users."""
    d = Path(tempfile.mkdtemp(prefix="gc-shared-", dir="/tmp"))
    d.chmod(0o1777)
    home = Path(tempfile.mkdtemp(prefix="gc-victim-home-", dir="/tmp"))  # the victim's own files
    (home / "notes.txt").write_text("the victim's notes\n")
    (home / "log.txt").write_text("the victim's log\n")
    try:
        yield d, home
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def as_user(uid: int, gid: int, fn) -> int:
    """Run fn() in a forked child under uid/gid; its pid (the child exits with fn's return, 1 on an error)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            code = fn() or 0
        except BaseException as e:  # noqa: BLE001
            sys.stderr.write(f"attacker: {type(e).__name__}: {e}\n")
        finally:
            os._exit(code)
    return pid


def swap_every_run_dir(folder: Path, target: Path, stash: Path, ready: Path, stop: Path, log: Path):
    """The attacker: for `seconds`, every new folder in `folder` is moved to `stash` and replaced by a link to
    `target` (the audit's swap). What it managed is appended to `log`."""
    def loop():
        ready.write_text("watching")
        done = set()
        while not stop.exists():
            for entry in os.scandir(folder):
                if entry.name in done or not entry.is_dir(follow_symlinks=False):
                    continue
                done.add(entry.name)
                try:
                    os.rename(entry.path, stash / entry.name)
                    os.symlink(target, entry.path)
                    what = "swapped"
                except OSError as e:
                    what = f"could not swap: {e.strerror}"
                with open(log, "a") as f:
                    f.write(f"{entry.name}: {what}\n")
            time.sleep(0.005)
        return 0
    return loop


@ROOT_ONLY
def test_a_gpucheckup_runs_folder_made_by_another_user_is_refused(attacker, shared):
    uid, gid, name = attacker
    d, home = shared
    before = snapshot(home)
    runs = d / "gpucheckup-runs"
    stash, ready, stop, log = d / "stash", d / "ready", d / "stop", d / "attack.log"

    def setup():
        runs.mkdir()
        runs.chmod(0o777)
        stash.mkdir()
        return swap_every_run_dir(runs, home, stash, ready, stop, log)()

    child = as_user(uid, gid, setup)
    try:
        end = time.time() + 30
        while not ready.exists():
            assert time.time() < end, "the attacker did not start"
            time.sleep(0.02)
        assert runs.stat().st_uid == uid
        # the victim (root here) runs with the default --out, in the shared folder
        res = gpucheckup("run", "--no-report", "--", PY, "-c", "print('job ran')", cwd=d)
    finally:
        stop.write_text("stop")
        os.waitpid(child, 0)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "refusing --out gpucheckup-runs" in lines[0] and f"belongs to uid {uid} ({name})" in lines[0], lines[0]
    assert "job ran" not in res.stdout  # no job, no run directory
    assert snapshot(home) == before  # nothing written into the victim's home
    assert list(runs.iterdir()) == [] and list(stash.iterdir()) == []  # nor into the attacker's folders


@ROOT_ONLY
def test_in_a_root_owned_sticky_folder_the_swap_fails_and_nothing_is_written_outside(attacker, shared):
    """--out is the shared sticky folder itself (accepted: root's, sticky): the attacker cannot move the
    victim's run directory, and run directory names planted as links in advance are skipped."""
    uid, gid, _ = attacker
    d, home = shared
    before = snapshot(home)
    stash, ctl = Path(tempfile.mkdtemp(dir="/tmp")), Path(tempfile.mkdtemp(dir="/tmp"))
    ready, stop, log = ctl / "ready", ctl / "stop", ctl / "attack.log"
    os.chown(stash, uid, gid)
    os.chown(ctl, uid, gid)

    def plant_then_swap():
        now = time.time()
        for dt in range(0, 300):  # the next five minutes' run directory names, as links into the victim's home
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + dt))
            os.symlink(home, d / f"{stamp}-job")
        return swap_every_run_dir(d, home, stash, ready, stop, log)()

    child = as_user(uid, gid, plant_then_swap)
    try:
        end = time.time() + 30
        while not ready.exists():
            assert time.time() < end, "the attacker did not start"
            time.sleep(0.02)
        job = "import time; time.sleep(0.3); print('job ran')"
        res = gpucheckup("run", "--out", str(d), "--name", "job", "--no-report", "--", PY, "-c", job)
    finally:
        stop.write_text("stop")
        os.waitpid(child, 0)
    assert res.returncode == 0, res.stderr
    assert "job ran" in res.stdout
    assert snapshot(home) == before
    assert list(Path(stash).iterdir()) == []
    runs = [p for p in d.iterdir() if p.is_dir() and not p.is_symlink()]
    assert len(runs) == 1 and runs[0].name.endswith("-job-2"), runs  # the planted name was skipped
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    assert manifest["exit_code"] == 0 and "run_dir" not in manifest["failed"]
    assert (runs[0].stat().st_mode & 0o777) == 0o700
    assert "could not swap: Operation not permitted" in log.read_text()
    shutil.rmtree(stash, ignore_errors=True)
    shutil.rmtree(ctl, ignore_errors=True)


@pytest.mark.parametrize("out_mode, why", [(0o777, "writable by group and others"), (0o775, "writable by group")])
def test_an_out_folder_open_to_others_is_refused_in_one_line(tmp_path, out_mode, why):
    out = tmp_path / "runs"
    out.mkdir()
    out.chmod(out_mode)
    res = gpucheckup("run", "--out", str(out), "--", PY, "-c", "print('job ran')")
    assert res.returncode == 2 and "job ran" not in res.stdout
    assert res.stderr.count("\n") == 1 and why in res.stderr and "not sticky" in res.stderr, res.stderr
    assert list(out.iterdir()) == []


def test_a_run_directory_swapped_for_a_link_mid_run_is_not_written_through(tmp_path):
    """Defence in depth (the parent check stops other users first): the job itself moves its run directory
    away and leaves a link to a decoy. Neither the launcher nor the agent writes through the link; the
    launcher says so in one line and in the manifest, and checks up the folder it made."""
    pytest.importorskip("torch", reason="the agent activates once the job imports torch")
    out, decoy, moved = tmp_path / "runs", tmp_path / "decoy", tmp_path / "moved"
    decoy.mkdir()
    job = (f"import os, sys; d = os.environ['GPUCHECKUP_RUN_DIR']; os.rename(d, {str(moved)!r}); "
           f"os.symlink({str(decoy)!r}, d)\n"
           "import torch\n"
           "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
           "for _ in range(4):\n    m(torch.randn(2, 4)).sum().backward(); o.step()\n"
           "print('job done')\n")
    res = gpucheckup("run", "--out", str(out), "--no-nvml", "--json", str(tmp_path / "r.json"), "--", PY, "-c", job)
    assert "job done" in res.stdout, res.stderr
    assert list(decoy.iterdir()) == []  # nothing written through the link
    assert "was replaced by a link to" in res.stderr
    # the agent opened the run directory when it was armed, before the swap: its files went to that folder
    assert [line.split(",")[0] for line in (moved / "steps.csv").read_text().splitlines()[1:]] == ["1", "2", "3", "4"]
    manifest = json.loads((moved / "manifest.json").read_text())
    assert manifest["failed"]["run_dir"].startswith(str(out)) and manifest["exit_code"] == 0
    assert res.returncode == 0, res.stderr  # the check-up read the folder the launcher made


@pytest.mark.parametrize("name", ["nvml.csv", "steps.csv", "traces"])
def test_the_reader_refuses_a_run_directory_with_a_link_outside_it(tmp_path, name):
    src = Path(__file__).resolve().parent / "data" / "h200" / "runs"
    run = tmp_path / "run"
    shutil.copytree(next(p for p in sorted(src.iterdir()) if (p / "manifest.json").is_file()), run)
    assert gpucheckup("analyze", str(run), "--quiet").returncode == 0
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "nvml.csv").write_text("t_s,gpu\n")
    target = outside if name == "traces" else outside / "nvml.csv"
    if (run / name).is_dir():
        shutil.rmtree(run / name)
    else:
        (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    res = gpucheckup("analyze", str(run))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"{run / name}: a link to {target}, outside the run directory: refused" in res.stderr


def test_the_agent_refuses_a_run_directory_it_did_not_get_from_the_launcher(tmp_path):
    """GPUCHECKUP_RUN_DIR_ID names the folder the launcher made; another folder at that path is refused."""
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from gpucheckup.capture.agent import core\n"
            "core.install(%r, None, '1:1')\n"
            "print('agent', core._agent)\n") % (str(Path(__file__).resolve().parents[1] / "src"), str(d))
    res = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "agent None" in res.stdout
    assert "not the run directory the launcher made" in res.stderr
    assert list(d.iterdir()) == []

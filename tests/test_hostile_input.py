"""Hostile input: compressed bombs, sparse files, FIFOs and odd file names end in one line and
exit 2 with bounded memory and time; files that cannot be written end in exit 4 naming them.

Big inputs are built cheaply: a sparse file by truncate, a gzip of zeros streamed through zlib once per
test run. Peak memory is the subprocess's own (VmHWM, which it writes at exit)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import pytest

from conftest import trace_path, flat, read_report

GIB = 1 << 30
RSS_LIMIT_MB = 300  # a bomb's check-up peaks under this (docs/reliability.md)
HEAD = b'{"traceEvents": ['
END = b'{"ph": "M", "name": "end", "pid": 0, "tid": 0}]}'  # closes a stream of EVENTS
EVENTS = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}, ' * 40000  # ~3 MB


# The command as `gpucheckup` runs it, writing its own peak RSS (VmHWM) to $PEAK_RSS_OUT at exit: the fuzz's own
# launcher (fuzz/run.py MEASURED says why not the child's ru_maxrss)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
from run import MEASURED  # noqa: E402


def run_measured(*args: str, timeout: float = 120, cwd=None) -> tuple[int, str, str, float]:
    """Run `gpucheckup ARGS`: exit code, stdout, stderr and its own peak RSS in MB (VmHWM, from the process)."""
    fd, peak = tempfile.mkstemp(prefix="peak-rss-")
    os.close(fd)
    try:
        res = subprocess.run([sys.executable, "-c", MEASURED, *args], capture_output=True, cwd=cwd, timeout=timeout,
                             env={**os.environ, "PEAK_RSS_OUT": peak})
        text = Path(peak).read_text()
    finally:
        os.unlink(peak)
    rss = int(text) / 1024 if text else float("nan")
    return res.returncode, res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace"), rss


def gzip_of_zeros(path: Path, head: bytes, size: int = GIB, fill: bytes = b"\0") -> Path:
    """One gzip member: `head`, then `size` zero bytes (or `fill` bytes; at level 9, 1 GiB packs into ~1 MB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = fill * (16 << 20)
    with open(path, "wb") as f:
        f.write(c.compress(head))
        for _ in range(size // len(block)):
            f.write(c.compress(block))
        f.write(c.flush())
    return path


@pytest.fixture(scope="session")
def bombs(tmp_path_factory) -> dict[str, Path]:
    """A 1 GiB gzip of zeros, the same after `{"traceEvents": [`, and 2 GiB sparse files (plain and after the key)."""
    d = tmp_path_factory.mktemp("bombs")
    sparse = d / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(2 * GIB)
    sparse_key = d / "sparse_key.json"
    with open(sparse_key, "wb") as f:
        f.write(HEAD)
        f.truncate(2 * GIB)
    return {"zeros": gzip_of_zeros(d / "zeros.json.gz", b""), "zeros_after_key": gzip_of_zeros(d / "key.json.gz", HEAD),
            "zeros_after_events": gzip_of_zeros(d / "events.json.gz", HEAD + EVENTS),
            "sparse": sparse, "sparse_after_key": sparse_key,
            "long_event": gzip_of_zeros(d / "long.json.gz", HEAD + b'{"name": "', fill=b"a")}


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("kind", ["zeros", "zeros_after_key", "zeros_after_events", "sparse", "sparse_after_key"])
def test_a_bomb_is_one_line_and_exit_2_in_bounded_memory(bombs, kind):
    """Before: the whole file read into memory twice (2.2 GB for the gzip, 4.2 GB for the sparse file), and the
    cut search restarting at the same offset on every read after the key (quadratic: 228 s for 1 GB)."""
    rc, out, err, rss = run_measured("analyze", str(bombs[kind]), "--quiet", timeout=60)
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"
    line = one_line(err)
    assert rc == 2, err
    assert str(bombs[kind]) in line and "byte" in line and "0x00" in line, line


def test_an_event_without_end_is_refused_after_a_bounded_read(bombs):
    """Before: the search for a cut between events restarted at the same offset on every read, so time grew with
    the square of the event's length (a 1 GiB string: minutes). Now it resumes where it stopped, and an event
    longer than any profiler writes ends the read."""
    rc, out, err, rss = run_measured("analyze", str(bombs["long_event"]), "--quiet", timeout=60)
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"
    line = one_line(err)
    assert rc == 2 and str(bombs["long_event"]) in line and "no boundary between two events" in line, line


def events_bomb(path: Path, event: bytes, size: int, end: bytes = b"") -> Path:
    """One gzip member at level 9: the key, then `event` repeated to `size` bytes of JSON, then `end`."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = event * ((16 << 20) // len(event))
    with open(path, "wb") as f:
        f.write(c.compress(HEAD))
        for _ in range(max(size // len(block), 1)):
            f.write(c.compress(block))
        f.write(c.compress(end))
        f.write(c.flush())
    return path


def test_a_bomb_of_empty_events_ends_at_its_first_chunk(tmp_path):
    """`{},` repeated after the key: valid JSON, 358 million 'events' in 1 GiB (a 1 MB gzip), each decoded one by
    one (before: 162 s). None has a phase, which every trace event has: the first chunk ends the read."""
    bomb = events_bomb(tmp_path / "empty.json.gz", b"{},", GIB)
    rc, out, err, rss = run_measured("analyze", str(bomb), "--quiet", timeout=60)
    line = one_line(err)
    assert rc == 2 and str(bomb) in line and "no phase" in line and "events 1 to " in line, line
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"


def test_a_bomb_of_well_formed_events_is_refused_by_its_compression_ratio(tmp_path):
    """The same kernel event repeated: 256 MiB of JSON (3.3 million kernels) from a 0.9 MB gzip, ~290x, where a
    profiler's traces compress 9-30x (their times differ). Before: read and checked up whole (exit 0, minutes).
    Now the stream ends once it holds over 100x its compressed bytes read plus 8 MiB: 100 x 0.9 + 8 = 98 MiB."""
    bomb = events_bomb(tmp_path / "kernels.json.gz", EVENTS[: len(EVENTS) // 40000], 256 << 20, END)
    assert bomb.stat().st_size < 1 << 20
    rc, out, err, rss = run_measured("analyze", str(bomb), "--quiet", timeout=100)
    line = one_line(err)
    assert rc == 2 and str(bomb) in line and "compressed bomb" in line and "--max-json-gib" in line, line
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"


def test_the_compression_ratio_limit_is_lifted_by_the_size_flag(tmp_path):
    """48 MiB of repeated kernel events from a ~170 KB gzip (over 100 x 0.17 + 8 = 25 MiB) is refused, and read
    when the user names a size with --max-json-gib (a trace they vouch for)."""
    bomb = events_bomb(tmp_path / "kernels.json.gz", EVENTS[: len(EVENTS) // 40000], 48 << 20, END)
    rc, out, err, _ = run_measured("analyze", str(bomb), "--quiet")
    assert rc == 2 and "compressed bomb" in one_line(err), err
    rc, out, err, _ = run_measured("analyze", str(bomb), "--quiet", "--max-json-gib", "1")
    assert rc == 0, err


def test_the_most_compressible_real_trace_is_not_taken_for_a_bomb(tmp_path):
    """The real trace that compresses furthest (a CUPTI light window: 28.5x at gzip level 9, the highest of the
    H200 traces) still reads at level 9, as it would from any writer."""
    src = Path(__file__).parent / "data" / "h200" / "light" / "launch_bound_cupti" / "traces" / "trace.json.gz"
    with open(src, "rb") as f:
        data = zlib.decompress(f.read(), 31)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    packed = c.compress(data) + c.flush()
    assert len(data) / len(packed) > 25
    (tmp_path / "trace.json.gz").write_bytes(packed)
    rc, out, err, _ = run_measured("analyze", str(tmp_path / "trace.json.gz"), "--quiet")
    assert rc == 0, err


def test_the_decompressed_size_limit_is_a_flag(tmp_path):
    data = trace_path("launch_bound")
    rc, out, err, _ = run_measured("analyze", str(data), "--quiet", "--max-json-gib", "0.0001")
    assert rc == 2 and "--max-json-gib" in one_line(err) and str(data) in err, err
    rc, out, err, _ = run_measured("analyze", str(data), "--quiet", "--max-json-gib", "1")
    assert rc == 0, err


@pytest.mark.parametrize("element", [b"{}", b"1", b'""'], ids=["objects_in_a_list", "numbers", "strings"])
def test_a_large_events_array_of_non_events_is_one_line_in_bounded_memory(tmp_path, element):
    """`traceEvents` holding no objects (or one list of millions of `{}`) cannot be cut, so it is read whole; its
    untyped decoding cost ~25x the file (a 120 MB file: 3.1 GB, and 178 s for `1,` repeated, one exception per
    element). Now one line past 8 MiB read untyped. The whole read holds the file once: a 100 MB file peaks under
    its size plus 100 MB (the interpreter is ~45 MB; before, `data.strip()` made a second copy: ~2x the size)."""
    size = 100 << 20
    head, end = (b'{"traceEvents": [[', b"{}]]}") if element == b"{}" else (b'{"traceEvents": [', element + b"]}")
    path = tmp_path / "t.json"
    path.write_bytes(head + (element + b",") * ((size - len(head)) // (len(element) + 1)) + end)
    rc, _, err, rss = run_measured("analyze", str(path), "--quiet")
    assert rc == 2 and "too much to read untyped" in one_line(err), err
    assert rss < path.stat().st_size / 1e6 + 100, rss


def test_a_small_events_array_with_non_events_drops_them_and_checks_up(tmp_path):
    """Under the untyped limit, the elements that are not events are dropped and the rest checked up."""
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}'
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + b"1, " * 100_000 + event + b"]}")
    rc, _, err, _ = run_measured("analyze", str(path), "--quiet")
    assert rc == 0, err


def test_a_rank_folder_with_one_bomb_checks_up_the_good_ranks_and_names_the_bad_one(bombs, tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copy(trace_path("launch_bound"), folder / "rank1.json.gz")
    os.link(bombs["zeros_after_key"], folder / "rank0.json.gz")
    rc, out, err, rss = run_measured("analyze", str(folder), "--json", "-", timeout=60)
    assert rc == 0, err
    doc = flat(json.loads(out))
    notes = [n for n in doc["notes"] if "rank0.json.gz" in n]
    assert len(notes) == 1 and "skipped" in notes[0] and "0x00" in notes[0], doc["notes"]
    assert doc["trace"]["path"].endswith("rank1.json.gz")
    assert rss < RSS_LIMIT_MB + 200, f"peak RSS {rss:.0f} MB"


def test_a_rank_folder_names_a_bomb_or_sparse_file_that_holds_no_json_at_all(tmp_path):
    """A rank's file of zeros (a gzip bomb without the key, a sparse file) was passed over in silence: the folder's
    sniff for `traceEvents` took it for a configuration file. Only JSON without the key is such a file."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    real = Path(__file__).parent / "data" / "h200x2" / "ddp_healthy" / "traces"
    for name in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(real / name, folder / name)
    gzip_of_zeros(folder / "rank2.json.gz", b"", 64 << 20)
    with open(folder / "rank3.json", "wb") as f:
        f.truncate(2 * GIB)
    (folder / "meta.json").write_text('{"model": "resnet"}')  # a configuration file: still passed over
    rc, out, err, rss = run_measured("analyze", str(folder), "--json", "-", timeout=60)
    assert rc == 0, err
    doc = json.loads(out)
    skipped = [n for n in doc["notes"] if n.startswith("skipped")]
    assert len(skipped) == 2 and "rank2.json.gz" in skipped[0] and "rank3.json" in skipped[1], doc["notes"]
    assert all("0x00" in n for n in skipped), skipped
    assert sorted(r["rank"] for r in doc["job"]["ranks"]["table"]) == [0, 1], doc["job"]
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"


@pytest.mark.parametrize("bomb", ["empty_events", "kernel_events"])
def test_a_rank_folder_of_real_ranks_with_an_events_bomb_checks_up_the_good_ones(tmp_path, bomb):
    """Two real DDP ranks (H200) and a third rank that is a bomb of valid events (before: minutes, the folder's
    whole check-up waiting on it): the two are checked up together, the bomb named with why it was skipped."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    real = Path(__file__).parent / "data" / "h200x2" / "ddp_healthy" / "traces"
    for name in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(real / name, folder / name)
    event = b"{}," if bomb == "empty_events" else EVENTS[: len(EVENTS) // 40000]
    events_bomb(folder / "rank2.json.gz", event, 256 << 20, END)
    rc, out, err, rss = run_measured("analyze", str(folder), "--json", "-", timeout=100)
    assert rc == 0, err
    doc = json.loads(out)
    notes = [n for n in doc["notes"] if "rank2.json.gz" in n]
    assert len(notes) == 1 and "skipped" in notes[0], doc["notes"]
    assert ("no phase" if bomb == "empty_events" else "compressed bomb") in notes[0], notes
    assert sorted(r["rank"] for r in doc["job"]["ranks"]["table"]) == [0, 1], doc["job"]
    assert rss < RSS_LIMIT_MB + 200, f"peak RSS {rss:.0f} MB"


RUN = Path(__file__).parent / "data" / "h200" / "runs" / "20261129-105942-launch_bound"


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_a_fifo_given_as_the_trace_is_refused_at_once(tmp_path, name):
    """Before: open() of a FIFO without a writer blocked forever."""
    fifo = tmp_path / name
    os.mkfifo(fifo)
    rc, out, err, _ = run_measured("analyze", str(fifo), timeout=20)
    assert rc == 2 and "FIFO" in one_line(err) and str(fifo) in err, err


def test_a_device_given_as_the_trace_is_refused():
    rc, out, err, _ = run_measured("analyze", "/dev/zero", timeout=20)
    assert rc == 2 and "character device" in one_line(err), err


@pytest.mark.parametrize("member", ["steps.csv", "manifest.json", "env.json", "nvml.csv", "flops.json", "cpu.csv"])
def test_a_fifo_inside_a_run_directory_ends_in_a_line_not_a_hang(tmp_path, member):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / member).unlink()
    os.mkfifo(run / member)
    rc, out, err, _ = run_measured("analyze", str(run), "--quiet", "--json", str(tmp_path / "r.json"), timeout=20)
    assert rc in (0, 2), err
    assert "Traceback" not in err
    if rc == 2:
        assert "FIFO" in one_line(err)


def test_a_fifo_in_a_rank_folder_is_passed_over(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copy(trace_path("launch_bound"), folder / "rank0.json.gz")
    os.mkfifo(folder / "rank1.json")
    rc, out, err, _ = run_measured("analyze", str(folder), "--quiet", timeout=20)
    assert rc == 0, err


ODD = os.fsdecode(b"rank0-\xff\xfe-\x1b[2J.json.gz")  # not UTF-8, and an escape sequence


def test_a_file_name_that_is_not_utf8_is_written_escaped_in_every_output(tmp_path):
    """Before: --json, --json - and --html ended in exit 70 (UnicodeEncodeError); the terminal and Markdown worked."""
    trace = tmp_path / ODD
    shutil.copy(trace_path("launch_bound"), trace)
    outs = {k: tmp_path / f"out.{k}" for k in ("json", "html", "md")}
    rc, out, err, _ = run_measured("analyze", str(trace), "--json", str(outs["json"]), "--html", str(outs["html"]),
                                   "--markdown", str(outs["md"]))
    assert rc == 0, err
    rc2, stdout_json, err2, _ = run_measured("analyze", str(trace), "--json", "-", "--quiet")
    assert rc2 == 0, err2
    for text in (outs["json"].read_bytes(), stdout_json.encode(), outs["html"].read_bytes(), out.encode()):
        text.decode("utf-8")  # valid UTF-8
        assert b"\x1b" not in text and b"\\udcff" in text.replace(b"\\\\", b"\\")
    # the JSON keeps the name's characters (ESC as JSON's \u001b); the bytes that are not UTF-8 read as escapes
    assert flat(json.loads(stdout_json))["trace"]["path"].endswith("rank0-\\udcff\\udcfe-\x1b[2J.json.gz")


def test_output_names_that_are_not_utf8_or_hold_escapes_are_shown_escaped(tmp_path):
    """The lines saying where each output went printed the user's file name raw: an ESC sequence in it (a name
    from a script) cleared the terminal, a byte that is not UTF-8 went out as it was."""
    name = os.fsdecode(b"out-\xff-\x1b[2J")
    args = []
    for option in ("--json", "--html", "--markdown", "--perfetto"):  # relative: a long folder would wrap the lines
        args += [option, f"{name}{option}"]
    rc, out, err, _ = run_measured("analyze", str(trace_path("launch_bound")), "--quiet", *args, cwd=tmp_path)
    assert rc == 0, err
    said = (out + err).encode("utf-8", "surrogateescape")
    assert b"\x1b" not in said and b"\xff" not in said, said
    assert said.count(b"out-\\udcff-\\x1b[2J") == 4, said
    assert len(os.listdir(tmp_path)) == 4


def _trace_with_kernel_name(path: Path, name: str) -> Path:
    import gzip

    doc = json.loads(gzip.decompress(trace_path("launch_bound").read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    first = kernels[0]["name"]
    for e in kernels:
        if e["name"] == first:
            e["name"] = name
    path.write_bytes(json.dumps(doc, ensure_ascii=False).encode())
    return path


def test_c1_and_bidi_characters_of_kernel_names_are_escaped_in_json_and_perfetto(tmp_path):
    """Before: `--json -` and the Perfetto file carried U+009B (a terminal's CSI) and U+202E raw."""
    name = "evil\u009b2J\u202ekernel\u0085"
    trace = _trace_with_kernel_name(tmp_path / "t.json", name)
    perfetto = tmp_path / "annotated.json"
    rc, out, err, _ = run_measured("analyze", str(trace), "--json", "-", "--quiet", "--perfetto", str(perfetto))
    assert rc == 0, err
    for data in (out.encode(), perfetto.read_bytes()):
        for ch in ("\u009b", "\u202e", "\u0085"):
            assert ch.encode() not in data
    assert name in out.encode().decode("unicode_escape", errors="ignore") or "\\u009b" in out
    names = {e.get("name") for e in json.loads(perfetto.read_bytes())["traceEvents"]}
    assert name in names  # the same string to a JSON reader
    assert name in json.dumps(json.loads(out), ensure_ascii=False)


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_exit_4_naming_the_file(tmp_path, monkeypatch):
    """Before: exit 70 "internal error", and the line did not name the file."""
    from gpucheckup import atomic
    from gpucheckup.cli import main

    out = tmp_path / "report.json"
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        write = staticmethod(_no_space)

    def fdopen(fd, mode="r", *args, **kwargs):  # only atomic.py's temporary file is opened "wb" by fd here
        f = real_fdopen(fd, mode, *args, **kwargs)
        return Full(f) if mode == "wb" else f

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)
    lines = []
    monkeypatch.setattr("gpucheckup.cli.say", lines.append)
    rc = main(["analyze", str(trace_path("launch_bound")), "--quiet", "--json", str(out)])
    assert rc == 4, lines
    assert lines == [f"gpucheckup: error: {out}: not written (No space left on device)"]
    assert os.listdir(tmp_path) == []  # no temporary file left behind


def test_a_write_cut_short_by_a_size_limit_is_exit_4(tmp_path):
    """A real failing write (RLIMIT_FSIZE, as a full disk fails it: mid-file), in a subprocess."""
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "r.html"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(trace_path("launch_bound")), "--quiet",
                          "--html", str(out)], preexec_fn=limit, capture_output=True, text=True, timeout=120)
    assert res.returncode == 4 and f"{out}: not written" in one_line(res.stderr), res.stderr
    assert not out.exists()


@pytest.mark.parametrize("option", ["--json", "--html", "--markdown", "--perfetto"])
def test_an_output_path_that_is_a_folder_or_under_a_missing_one_is_exit_4_and_creates_nothing(tmp_path, option):
    """Before: --json at a folder gave exit 70 naming a temporary file; a missing parent was created (even
    under /), or gave exit 70."""
    trace = str(trace_path("launch_bound"))
    rc, out, err, _ = run_measured("analyze", trace, "--quiet", option, str(tmp_path))
    assert rc == 4 and one_line(err) == f"gpucheckup: error: {tmp_path}: not written: it is a folder (name a file)"
    missing = tmp_path / "no" / "such" / "r.out"
    rc, out, err, _ = run_measured("analyze", trace, "--quiet", option, str(missing))
    assert rc == 4 and str(missing) in one_line(err) and "does not exist" in err, err
    assert not (tmp_path / "no").exists()


def test_run_out_under_a_missing_folder_is_exit_4_makes_nothing_and_runs_no_job(tmp_path):
    """`run --out` makes the folder it names, never the folders above it (before: `mkdir -p`, so a typo in a parent
    made folders, and the job ran). The job would leave a marker file; it must not start."""
    marker = tmp_path / "job-ran"
    job = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    out = tmp_path / "no" / "such" / "runs"
    rc, _, err, _ = run_measured("run", "--out", str(out), "--no-report", *job)
    line = one_line(err)
    assert rc == 4 and line.startswith(f"gpucheckup: error: {out}: not made") and f"{tmp_path / 'no' / 'such'}" in line
    assert "does not exist" in line, err
    assert not (tmp_path / "no").exists() and not marker.exists()
    # the folder itself, under one that exists, is made (0700) and holds the run directory; the job ran
    out = tmp_path / "runs"
    rc, _, err, _ = run_measured("run", "--out", str(out), "--no-report", *job)
    assert rc == 0 and marker.exists(), err
    assert out.is_dir() and (out.stat().st_mode & 0o777) == 0o700 and len(list(out.iterdir())) == 1


def _device(folder: Path, name: str, minor: int) -> Path:
    """A character device of memory's major (1): 3 is null, 7 is full. Made in `folder` where this user may (root),
    else the system's own (/dev, which such a user cannot replace)."""
    dev = folder / name
    try:
        os.mknod(dev, 0o666 | 0o020000, os.makedev(1, minor))
        return dev
    except PermissionError:
        return Path("/dev") / name


@pytest.mark.parametrize("option", ["--json", "--html", "--perfetto"])
def test_an_output_naming_a_device_writes_to_it_and_never_replaces_it(tmp_path, option):
    """`--json /dev/stdout`, `--html /dev/null`: the output goes to the device. Before, a user who could write the
    device's folder (root, for /dev) had the device replaced by a regular file holding the report."""
    trace = str(trace_path("launch_bound"))
    dev = _device(tmp_path, "null", 3)
    rc, out, err, _ = run_measured("analyze", trace, "--quiet", option, str(dev))
    assert rc == 0, err
    assert dev.is_char_device() and os.listdir(tmp_path) == ([dev.name] if dev.parent == tmp_path else [])
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")  # as /dev/stdout is: here, the pipe the test reads
    rc, out, err, _ = run_measured("analyze", trace, "--quiet", option, str(stdout))
    assert rc == 0 and out.lstrip().startswith("{" if option != "--html" else "<"), (err, out[:80])
    assert stdout.is_symlink()


def test_an_output_to_a_full_device_is_exit_4_naming_it(tmp_path):
    """A device that fails every write with ENOSPC (/dev/full's numbers), as a full disk does: exit 4, one line
    naming the file, the device left as it was."""
    dev = _device(tmp_path, "full", 7)
    rc, out, err, _ = run_measured("analyze", str(trace_path("launch_bound")), "--quiet", "--json", str(dev))
    assert rc == 4 and one_line(err) == f"gpucheckup: error: {dev}: not written (No space left on device)", err
    assert dev.is_char_device()


def test_an_output_naming_a_fifo_without_a_reader_is_exit_4_not_a_hang(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    rc, out, err, _ = run_measured("analyze", str(trace_path("launch_bound")), "--quiet", "--json", str(fifo),
                                   timeout=30)
    assert rc == 4 and str(fifo) in one_line(err) and "no reader" in err, err


def test_the_exit_code_table_is_in_help_and_the_readme():
    from gpucheckup import errors

    res = subprocess.run([sys.executable, "-m", "gpucheckup", "--help"], capture_output=True, text=True, timeout=60)
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for code in (errors.EXIT_OK, errors.EXIT_BAD_INPUT, errors.EXIT_FAILED_CONDITION, errors.EXIT_NOT_WRITTEN,
                 errors.EXIT_INTERNAL, errors.EXIT_BROKEN_PIPE, errors.EXIT_INTERRUPTED):
        assert f"\n  {code:<3} " in res.stdout, res.stdout
        assert f"| {code} |" in readme


def test_nvidia_smi_that_cannot_be_executed_loses_only_the_topology(tmp_path, monkeypatch):
    """Before: only FileNotFoundError was caught, so a PermissionError (nvidia-smi in a folder the user cannot
    enter, or without execute permission) lost the whole host environment: env.json kept only the job."""
    from gpucheckup.capture import environment

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho topo\n")
    smi.chmod(0o644)  # no execute bit: exec fails with EACCES, for root as well
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    env = environment.collect_host({"NCCL_DEBUG": "INFO"})
    assert env["topology"].startswith("unavailable: nvidia-smi cannot be run")
    assert env["hostname"] and env["cpu"]["count"] and env["variables"] == {"NCCL_DEBUG": "INFO"}


def test_each_environment_probe_fails_alone(monkeypatch):
    from gpucheckup.capture import environment

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(environment, "cpu_budget", broken)
    monkeypatch.setattr(environment, "gpu_inventory", broken)
    env = environment.collect_host({})
    assert env["cpu"] == {} and env["gpus"] == []  # the types the run directory's reader checks
    assert env["unavailable"] == {"cpu": "RuntimeError: boom", "gpus": "RuntimeError: boom"}
    assert env["nvml"] == "unavailable: RuntimeError: boom"
    assert env["platform"] and env["topology"] and "memory_gb" in env


def test_a_sparse_file_given_as_the_ncu_csv_is_one_line_in_bounded_memory(tmp_path):
    """`--ncu` read its file whole as text: a 2 GiB sparse file took over a minute and gigabytes. Its lines are now
    read with a bounded length, and a file with none ending (4 MiB) is one line."""
    sparse = tmp_path / "ncu.csv"
    with open(sparse, "wb") as f:
        f.truncate(2 * GIB)
    rc, out, err, rss = run_measured("analyze", str(trace_path("launch_bound")), "--quiet", "--ncu", str(sparse),
                                     timeout=60)
    line = one_line(err)
    assert rc == 2 and str(sparse) in line and "a line over 4 MiB" in line, line
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"


def test_a_sparse_file_given_to_compare_is_refused_by_its_size(tmp_path):
    """compare reads a check-up document whole: a 2 GiB sparse .json (no traceEvents at its start, so taken for a
    document) was read into memory (2.1 GB peak) before its line."""
    sparse = tmp_path / "a.json"
    with open(sparse, "wb") as f:
        f.truncate(2 * GIB)
    rc, out, err, rss = run_measured("compare", str(sparse), str(sparse), timeout=60)
    line = one_line(err)
    assert rc == 2 and str(sparse) in line and "2048 MiB, over the 256 MiB" in line, line
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"


def test_a_time_of_1e308_in_nvml_csv_is_one_line_not_a_crash(tmp_path):
    """Found by the fuzz (seed 600, case 6767): an attach run whose nvml.csv holds a t_s of 1e308 (finite, so read)
    crashed the terminal report there (TypeError, exit 70): its evidence's start, 1000 x 1e308 ms, is inf. Before,
    this copy of a real attach run read the time as it was (exit 0)."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "h200" / "runs" / "20261129-110024-attach-653", run)
    lines = (run / "nvml.csv").read_text().splitlines()
    lines[5] = "1e308" + lines[5][lines[5].index(","):]
    (run / "nvml.csv").write_text("\n".join(lines) + "\n")
    rc, out, err, _ = run_measured("analyze", str(run))
    line = one_line(err)
    assert rc == 2 and "nvml.csv: line 6, column t_s: '1e308' is not a time" in line, line


@pytest.mark.parametrize("member", ["env.json", "manifest.json", "steps.csv", "nvml.csv"])
def test_a_sparse_file_inside_a_run_directory_is_one_line_in_bounded_memory(tmp_path, member):
    """Before: a 2 GB sparse CSV was read as one 2 GB line (4.2 GB peak, 22 s), a JSON file read whole."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    with open(run / member, "r+b") as f:
        f.truncate(2 * GIB)
    rc, out, err, rss = run_measured("analyze", str(run), "--quiet", timeout=60)
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"
    assert rc == 2 and member in one_line(err), err


@pytest.mark.parametrize("value", ["1e300", "-1e300", "9.3e18"])
def test_a_huge_clock_reason_in_nvml_csv_is_unknown_not_a_cast_overflow(tmp_path, value):
    """Before: the float was cast to int64 (RuntimeWarning 'invalid value encountered in cast' on stderr, and a
    garbage bit mask read as throttling)."""
    import csv

    rows = list(csv.reader((RUN / "nvml.csv").open()))
    j = rows[0].index("clock_reasons")
    for r in rows[1:]:
        r[j] = value
    rec = tmp_path / "rec.csv"
    with rec.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    res = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "gpucheckup", "analyze", str(rec),
                          "--json", str(tmp_path / "r.json"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    doc = read_report(tmp_path / "r.json")
    assert doc["run_figures"]["nvml"]["throttle"]["known"] is False  # no sample holds a bit mask
    assert not any(doc["nvml"]["throttled"])


def _control_server(seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(Path(__file__).parent / "jobs" / "control_server.py"), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def _trickle(path: str, stop: threading.Event) -> None:
    """A same-user client that sends its request a byte at a time, never finishing the line."""
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    try:
        while not stop.is_set():
            s.sendall(b" ")
            stop.wait(0.3)
    except OSError:
        pass
    finally:
        s.close()


def test_slow_clients_cannot_hold_the_control_channel():
    """Before: the 2 s timeout was per read, so 16 clients sending a byte every 0.3 s held every slot for as long
    as they liked: `attach` found 'no agent answers' and --mode auto fell back to py-spy without a word."""
    from gpucheckup.capture import attach, control
    from gpucheckup.capture.agent.server import MAX_CLIENTS

    server = _control_server(30)
    stop = threading.Event()
    try:
        path = str(control.socket_path(server.pid))
        slow = [threading.Thread(target=_trickle, args=(path, stop)) for _ in range(MAX_CLIENTS)]
        for t in slow:
            t.start()
        time.sleep(0.5)  # every slot taken
        try:
            busy = control.request(server.pid, {"cmd": "status"}, 2.0)
            assert busy and not busy[0]["ok"] and "too many connections" in busy[0]["error"]
        except (ConnectionResetError, BrokenPipeError):  # the busy answer, closed before our request was read
            pass
        found, why = attach.find_agent(server.pid)  # the slots come back within the request deadline
        assert found == server.pid, why
    finally:
        stop.set()
        server.kill()
        server.wait()


def test_attach_says_why_no_agent_answers(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        res = subprocess.run([sys.executable, "-m", "gpucheckup", "attach", "--pid", str(job.pid), "--mode", "agent",
                              "--duration", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    finally:
        job.kill()
        job.wait()
    assert res.returncode == 2 and "no control socket in it or its children" in one_line(res.stderr), res.stderr


@pytest.mark.parametrize("name", [-1e9, [], {"a": 1}, None])
def test_a_gpu_name_of_the_wrong_type_in_env_json_checks_up(tmp_path, name):
    """Found by the seed-500 fuzz run (cases 10489, 19995): a float or a list as a GPU's name in env.json made
    the run's figures fail (TypeError joining or hashing it)."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    env = json.loads((run / "env.json").read_text())
    env["gpus"] = [{"index": 0, "name": name}]
    (run / "env.json").write_text(json.dumps(env))
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--html", str(tmp_path / "r.html")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "environment" in res.stdout and "?" in res.stdout

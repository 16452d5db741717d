"""Bounded fuzzing on every test run: mutated real traces, folders of ranks and run directories
(fuzz/corpus/, fuzz/mutate.py) end in a check-up or a one-line error, never an uncaught exception,
raw control characters on the terminal, or a case running past the hang bound.

Hypothesis drives the structure (which seed, which operators, which values), derandomized so that
every run checks the same cases and a failure shrinks to a small one. The big run is
`python fuzz/run.py --cases 100000` (docs/reliability.md).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))
import mutate  # noqa: E402
import run as fuzz_run  # noqa: E402

CASES = 800  # in-process cases per test run: under a minute of CPU
SUBPROCESS_CASES = 4


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang(f"a case ran over {fuzz_run.HANG_S:.0f} s")


@settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(rnd=st.randoms(use_true_random=False))
def test_mutated_inputs_end_in_a_checkup_or_a_one_line_error(rnd: random.Random):
    case = mutate.build_case(rnd)
    with tempfile.TemporaryDirectory(prefix="gpucheckup-fuzz-") as d, fuzz_run._env_for_cases(Path(d)):
        argv = mutate.write_case(case, Path(d))
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(int(fuzz_run.HANG_S))
        try:
            outcome, key, detail = fuzz_run.invoke(argv)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    assert outcome in ("checkup", "error"), f"{outcome}: {key} {detail} (ops {case.ops}, options {case.options})"


def test_a_sample_as_real_subprocesses(tmp_path):
    """The same cases through `python -m gpucheckup`: exit 0 or 2, an error is one line."""
    for i in range(SUBPROCESS_CASES):
        case = mutate.build_case(random.Random(f"ci:{i}"))
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        argv = mutate.write_case(case, folder)[1:]  # without --debug: the user's exit codes
        with fuzz_run._env_for_cases(folder):
            p = subprocess.run([sys.executable, "-m", "gpucheckup", *argv], capture_output=True, timeout=120)
        assert p.returncode in (0, 2), (case.ops, p.stderr[-500:])
        if p.returncode == 2:
            assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) == 1, p.stderr


def test_every_hostile_kind_ends_in_one_line_in_a_fresh_process_of_bounded_peak(tmp_path):
    """Each hostile file the harness plants (bombs, sparse files, a FIFO, devices, a socket), as the trace: exit 2 in
    one line, and its own peak resident set, measured in a fresh process as the harness does, under 300 MB (the
    largest real trace in tests/data checks up whole, every output on, in ~130 MB on this machine)."""
    for kind in mutate.HOSTILE_KINDS:
        folder = tmp_path / kind.replace(":", "-")
        folder.mkdir()
        if kind.startswith("bomb:"):
            data = mutate.gzip_bomb(kind[5:])
        elif kind.startswith("sparse"):
            data = mutate.Special("sparse", mutate.SPARSE_BYTES, b'{"traceEvents": [' if kind.endswith("key") else b"")
        else:
            data = mutate.Special(kind)
        name = "trace.json.gz" if kind.startswith("bomb:") else "trace.json"
        case = mutate.Case("trace", {name: data}, ["--quiet"], [f"hostile:{kind}:{name}"], name)
        with fuzz_run._env_for_cases(folder):
            got = fuzz_run.run_subprocess(mutate.write_case(case, folder)[1:])
        assert got["rc"] == 2 and got["ok"], (kind, got)
        assert got["rss_mb"] is not None and got["rss_mb"] < 300, (kind, got)


def test_a_fresh_process_peak_is_its_own_not_the_harness_s(tmp_path):
    """The harness's per-case figure is the case's own process's: a harness holding 400 MB (touched) does not raise
    it. A check-up of a corpus trace peaks well under 200 MB alone (~50 MB: `/usr/bin/time -v` on this machine)."""
    held = bytearray(400 << 20)
    held[::4096] = b"\1" * len(held[::4096])  # every page touched: resident
    trace = sorted((mutate.CORPUS / "traces").glob("*.json.gz"))[0]
    case = mutate.Case("trace", {trace.name: trace.read_bytes()}, ["--quiet"], [], trace.name)
    with fuzz_run._env_for_cases(tmp_path):
        got = fuzz_run.run_subprocess(mutate.write_case(case, tmp_path)[1:])
    del held
    assert got["rc"] == 0 and got["rss_mb"] is not None and got["rss_mb"] < 200, got

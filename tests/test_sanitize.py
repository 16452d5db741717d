"""Terminal, error-line, Markdown and HTML output never carries a trace's control or bidi characters raw.

A real trace (the H200 sync_bound capture) gets escape sequences planted in
its kernel, operator, thread and GPU names, a Python frame around its syncs and its file name: an
ESC/CSI screen clear and alternate screen, an OSC 8 hyperlink, an unterminated OSC title, BEL and
BS, the C1 CSI (U+009B) and a bidi override (U+202E). The check-up runs as a real subprocess with
its output to a pipe and to a forced-colour terminal; the raw bytes must contain none of the
sequences and must show them escaped (`\\x1b[2J`, `\\u202e`).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpucheckup.safe_text import safe, safe_tree

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "tests" / "data" / "h200" / "sync_bound" / "trace.json.gz"
PAYLOAD = ("\x1b[2J\x1b[?1049h" "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07" "\x07\x08\x08" "\u009b31m"
           "\u202eevil" "\x1b]0;owned")  # the unterminated OSC title last: it would swallow what follows
RAW = [b"\x1b[2J", b"\x1b[?1049h", b"\x1b]8;;", b"\x1b]0;", b"\x07", b"\x08", "\u009b".encode(), "\u202e".encode()]
SHOWN = [b"\\x1b[2J", b"\\x1b]8;;https://evil.example/\\x07click", b"\\x07\\x08\\x08", b"\\x9b31m", b"\\u202eevil",
         b"\\x1b]0;owned"]
FILE_NAME = "trace\x1b[2J\u202e\x07\u009b.json.gz"


def _planted(folder: Path, name: str = FILE_NAME) -> Path:
    """The seed trace with the payload in every kind of name a report shows, written under `folder`."""
    doc = json.loads(gzip.decompress(SEED.read_bytes()))
    doc["deviceProperties"][0]["name"] = "NVIDIA H200 " + PAYLOAD
    doc["with_stack"] = 1
    frames = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            e["args"]["name"] = "main " + PAYLOAD
        elif e.get("cat") == "kernel":
            e["name"] = "gemm_kernel" + PAYLOAD + "<float>"
        elif e.get("cat") == "cpu_op" and e["name"] not in ("aten::item", "aten::_local_scalar_dense"):
            e["name"] = e["name"] + PAYLOAD
        elif e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"] or e.get("name") == "cudaMemcpyAsync":
            frames.append({"ph": "X", "cat": "python_function", "name": "train.py(42): step " + PAYLOAD,
                           "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] - 0.5, "dur": e["dur"] + 1.0})
    doc["traceEvents"] += frames
    path = folder / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _run(args: list, color: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    env.update(COLUMNS="200", PYTHONPATH=str(ROOT / "src"))
    if color:
        env.update(FORCE_COLOR="1", TERM="xterm-256color")
    return subprocess.run([sys.executable, "-m", "gpucheckup", *map(str, args)], capture_output=True, env=env,
                          timeout=120)


def _assert_clean(data: bytes, where: str, shown=SHOWN) -> None:
    for raw in RAW:
        assert raw not in data, f"{where}: raw {raw!r} reached the output"
    for esc in shown:
        assert esc in data, f"{where}: {esc!r} not shown escaped"


def test_safe_escapes_controls_and_bidi_and_keeps_text():
    assert safe(PAYLOAD).encode() == (b"\\x1b[2J\\x1b[?1049h\\x1b]8;;https://evil.example/\\x07click\\x1b]8;;\\x07"
                                      b"\\x07\\x08\\x08\\x9b31m\\u202eevil\\x1b]0;owned")
    assert safe("line one\n\tindented ok: é ü 日本 [bold]") == "line one\n\tindented ok: é ü 日本 [bold]"
    assert safe("\x7f\x85\u2066\u2069\u200e\u200f\u202a\ud800") == (
        "\\x7f\\x85\\u2066\\u2069\\u200e\\u200f\\u202a\\ud800")
    assert safe_tree({"a\x1b": ["\u202e", ("x\x07", 3)], "n": 1.5}) == {"a\\x1b": ["\\u202e", ("x\\x07", 3)], "n": 1.5}


@pytest.mark.parametrize("color", [False, True], ids=["pipe", "forced-colour"])
def test_terminal_report_shows_planted_sequences_escaped(tmp_path, color):
    trace = _planted(tmp_path)
    p = _run(["analyze", trace], color=color)
    assert p.returncode == 0, p.stderr
    if color:
        assert b"\x1b[" in p.stdout  # Rich did colour it: the check below is on a real terminal stream
    _assert_clean(p.stdout, "terminal")
    out = p.stdout.decode()
    assert "gemm_kernel\\x1b[2J" in out  # the kernel name
    assert "NVIDIA H200 \\x1b[2J" in out  # the GPU name
    assert "trace\\x1b[2J\\u202e\\x07\\x9b.json.gz" in out  # the trace's file name
    assert "train.py(42): step \\x1b[2J" in out  # the Python frame of the syncs
    assert "owned" in out.split("train.py(42)")[-1]  # nothing after the title sequence was swallowed


def test_progress_line_on_a_terminal_shows_the_file_name_escaped(tmp_path):
    trace = _planted(tmp_path)
    p = _run(["analyze", trace, "--quiet"], color=True)
    assert p.returncode == 0, p.stderr
    assert b"reading" in p.stderr  # the progress line was drawn
    _assert_clean(p.stderr, "progress line", shown=[b"trace\\x1b[2J"])


def test_rich_markup_in_names_prints_as_written(tmp_path):
    doc = json.loads(gzip.decompress(SEED.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "[bold red]k[/] [link=https://evil.example]x[/link]"
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    p = _run(["analyze", trace], color=True)
    assert p.returncode == 0, p.stderr
    assert b"[bold red]k[/] [link=https://evil.example]x" in p.stdout
    assert b"\x1b]8;" not in p.stdout


def test_markdown_and_html_show_planted_sequences_escaped(tmp_path):
    trace = _planted(tmp_path)
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    p = _run(["analyze", trace, "--quiet", "--markdown", md, "--html", page])
    assert p.returncode == 0, p.stderr
    data = md.read_bytes()
    for raw in RAW:
        assert raw not in data, f"Markdown: raw {raw!r}"
    # Markdown escapes the backslash of each escape itself (`\\x1b`), which renders as `\x1b`.
    assert b"\\\\x1b\\[2J" in data and b"\\\\u202eevil" in data
    html = page.read_bytes()
    for raw in RAW:
        assert raw not in html, f"HTML: raw {raw!r}"
    assert b"\\u202eevil" in html


def test_error_lines_show_planted_sequences_escaped(tmp_path):
    bad = tmp_path / FILE_NAME
    bad.write_bytes(b"\x1f\x8b not gzip")
    p = _run(["analyze", bad])
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and b"internal error" not in p.stderr
    _assert_clean(p.stderr, "error line", shown=[b"trace\\x1b[2J\\u202e\\x07\\x9b.json.gz"])
    missing = tmp_path / ("no such " + PAYLOAD + ".json")
    p = _run(["analyze", missing])
    assert p.returncode == 2
    _assert_clean(p.stderr, "error line (missing file)", shown=[b"\\x1b[2J", b"\\x07\\x08\\x08", b"\\x9b31m",
                                                                b"\\u202eevil", b"\\x1b]0;owned"])


def test_error_line_from_a_run_directory_cell(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"kind": "run", "command": ["python", "train.py" + PAYLOAD]}))
    (run / "steps.csv").write_text("step,t_end_s,ms,phase\n1,1.0,\x1b[2J\u202e,\n")
    p = _run(["analyze", run])
    assert p.returncode == 2, p.stdout
    _assert_clean(p.stderr, "run directory error", shown=[])
    assert b"not a number" in p.stderr


def test_ncu_cmd_writes_kernel_names_printable_and_its_regex_still_matches_them(tmp_path):
    """`gpucheckup ncu-cmd` puts kernel names into a shell command: shell-quoted, controls as regex escapes."""
    import re
    import shlex

    trace = _planted(tmp_path, "t.json.gz")
    p = _run(["ncu-cmd", trace])
    assert p.returncode == 0, p.stderr
    for raw in RAW:
        assert raw not in p.stdout, f"ncu-cmd: raw {raw!r} reached the output"
    line = p.stdout.decode()
    assert line.count("\n") == 1
    regex = shlex.split(line)[shlex.split(line).index("--kernel-name") + 1]
    assert regex.startswith("regex:") and "\\x1b\\[2J" in regex and "\\u202eevil" in regex
    assert re.fullmatch(regex[len("regex:"):], "gemm_kernel" + PAYLOAD)  # the regex reads back the real name
    from gpucheckup.checkup.ncu_cmd import printable_regex
    name = "k\n\t\x1b\u202e\ud800.(x)*\\"
    assert re.fullmatch(printable_regex(name), name) and not set(printable_regex(name)) & set("\n\t\x1b\u202e")

"""The benches, docs and sources run and read the same on anyone's machine: no absolute path of a particular
machine's home or work folders in them, and every bench says in its docstring how to run it from a clone."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A user's or a build machine's own folders; public locations (/usr/bin/time, /tmp/...) are not a machine's own.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|root|Users|mnt|scratch)/[\w.-]")


def _tracked(*folders: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--", *folders], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an unpacked archive): every file there
        return [p for f in folders for p in (REPO / f).rglob("*") if p.is_file()]
    return [REPO / line for line in out.stdout.splitlines()]


def test_no_absolute_path_of_a_machine_in_bench_docs_or_src():
    found = []
    for path in _tracked("bench", "docs", "src"):
        if path.suffix in {".gz", ".png", ".pyc"}:
            continue
        text = path.read_text(errors="replace")
        found += [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                  for m in MACHINE_PATH.finditer(text)]
    assert not found, "\n".join(found)


def test_every_bench_says_how_to_run_it():
    """Each bench script's docstring gives its command line (`python bench/NAME.py ...`) or says what runs it."""
    for path in sorted((REPO / "bench").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert f"bench/{path.name}" in doc or "Usage" in doc, f"{path.name}: no command in its docstring"

"""The README, read as a newcomer on a fresh machine reads it: it opens with the two commands (the demo, the tests: the
very line CI runs), says what a fresh machine needs first, and every gpucheckup command line it shows parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DEMO = "pip install . && gpucheckup demo"
TESTS = "pip install -e '.[test]' && pytest && lint-imports"


def code_lines() -> list[str]:
    """Every command line of the README's bash blocks, without its comment."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_it_opens_with_the_demo_and_the_test_command_ci_runs():
    first = code_lines()[:2]
    assert [line.split("  ")[0] for line in first] == [DEMO, TESTS]
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]
    assert ci[-1] == TESTS  # CI runs the README's line, exactly


def test_a_fresh_machine_is_told_what_it_needs_before_the_first_install():
    before = README[:README.index(DEMO)]
    assert "python3 -m venv .venv && . .venv/bin/activate" in before
    assert "3.10" in before  # pyproject's requires-python
    assert "pytest -rs" in README  # why a test skipped
    assert "--brief" in README


def test_no_extras_install_replaces_the_editable_one():
    """`pip install '.[capture]'` after `pip install -e '.[test]'` reinstalls the package from a copy: the tests then
    run an install that no longer follows the clone. Every local extras install keeps -e."""
    extras = [ln for ln in code_lines() if re.search(r"pip install .*'\.\[", ln)]
    assert extras and all(" -e '.[" in ln for ln in extras), extras


@pytest.mark.parametrize("line", [ln for ln in code_lines() if ln.startswith("gpucheckup ")])
def test_every_gpucheckup_line_parses(line, monkeypatch):
    from gpucheckup.cli.parser import build_parser

    argv = shlex.split(line)[1:]
    argv = argv[:argv.index("|")] if "|" in argv else argv
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"README line does not parse ({e.code}): {line}")

"""Functions of one job: no function or method in src/ runs over MAX_LINES lines (its def line to its last line,
docstring included), so a newcomer reads each one top-down. Any still over it would be listed with its length
today (STILL_LONG): one may shrink or go, none may grow, and no new one may join them."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 60
# (module path under src/, qualified function name) -> its length today: none left.
STILL_LONG: dict[tuple[str, str], int] = {}


def long_functions(src: Path = SRC, limit: int = MAX_LINES) -> dict[tuple[str, str], int]:
    """Every function (methods and nested ones by their dotted names) longer than `limit` lines."""
    out = {}

    def visit(rel, node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.end_lineno - child.lineno + 1 > limit:
                    out[(rel, name)] = child.end_lineno - child.lineno + 1
                visit(rel, child, f"{name}.")
            else:
                visit(rel, child, prefix)

    for path in sorted(src.rglob("*.py")):
        visit(path.relative_to(src).as_posix(), ast.parse(path.read_text(encoding="utf-8")), "")
    return out


def test_the_counter_sees_a_long_function(tmp_path):
    # a module written here: a 3-line function and a 62-line one (def, docstring, 59 statements, return)
    (tmp_path / "m.py").write_text("def short():\n    '''x'''\n    return 1\n\n\nclass C:\n    def long(self):\n"
                                   "        '''y'''\n" + "        a = 1\n" * 59 + "        return a\n")
    assert long_functions(tmp_path) == {("m.py", "C.long"): 62}


def test_no_function_over_60_lines_but_the_listed_ones_and_none_grew():
    found = long_functions()
    new = sorted(f"{p}: {n} ({lines} lines)" for (p, n), lines in found.items() if (p, n) not in STILL_LONG)
    grew = sorted(f"{p}: {n} ({found[(p, n)]} lines, was {was})" for (p, n), was in STILL_LONG.items()
                  if found.get((p, n), 0) > was)
    assert not new, "split these into named steps (one job each, a one-line docstring): " + "; ".join(new)
    assert not grew, "grew: " + "; ".join(grew)

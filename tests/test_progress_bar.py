"""The check-up's progress bar (report/text/progress.py): off a terminal it writes exactly what rich's transient
Progress writes there, byte for byte; on a terminal it is rich's Progress itself."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpucheckup.report.text.progress import progress_bar


def _drive(bar) -> None:
    """The calls check_path makes: a task, new descriptions, advances."""
    with bar as p:
        task = p.add_task("reading traces", total=2)
        p.update(task, description="reading [bold]t.json.gz[/] (1.0 MB)")
        p.advance(task)
        p.update(task, description="analyzing t.json.gz")
        p.advance(task)


def test_off_a_terminal_it_writes_what_richs_transient_progress_writes():
    ours, theirs = io.StringIO(), io.StringIO()
    _drive(progress_bar(Console(file=ours)))
    rich_bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=Console(file=theirs), transient=True)
    _drive(rich_bar)
    assert ours.getvalue() == theirs.getvalue() == "\n"  # rich's stop() ends with one empty line off a terminal


def test_on_a_terminal_it_is_richs_progress():
    out = io.StringIO()
    bar = progress_bar(Console(file=out, force_terminal=True, width=100))
    assert isinstance(bar, Progress)
    _drive(bar)
    assert "reading traces" in out.getvalue() or "analyzing t.json.gz" in out.getvalue()  # it was drawn

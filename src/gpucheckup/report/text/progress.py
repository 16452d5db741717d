"""The check-up's progress bar: drawn on a terminal; off one (a pipe, a file, CI) rich's transient bar draws
nothing, so there it is not built and `rich.progress` (with rich.live, the spinners) is not imported: ~1% of a
1 MB trace's check-up (docs/performance.md)."""

from __future__ import annotations

from rich.console import Console


def progress_bar(console: Console):
    """A transient bar (spinner, what is being done, bar, time elapsed) on `console` where it can be seen (a
    terminal or a notebook); elsewhere a stand-in with the same calls that draws nothing, as the bar would."""
    if not (console.is_terminal or console.is_jupyter):
        return _Unseen(console)
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


class _Unseen:
    """What a transient rich Progress shows off a terminal: nothing, then the empty line its stop() prints there."""

    def __init__(self, console: Console):
        self.console = console

    def __enter__(self) -> _Unseen:
        return self

    def __exit__(self, *exc) -> None:
        self.console.print()

    def add_task(self, description: str, total: float | None = None, **fields) -> int:
        return 0

    def update(self, task: int, **fields) -> None:
        return None

    def advance(self, task: int, advance: float = 1) -> None:
        return None

"""The one exception type the command line turns into a one-line error and a non-zero exit, and the
function that prints such a line."""

import sys

from gpucheckup.safe_text import safe


class CheckupError(Exception):
    """Bad input or an impossible request, said in one line a user can act on."""


def say(line: str) -> None:
    """One unwrapped line on stderr (no Rich: an error must print even when rendering fails); control and bidi
    characters from a path or a trace shown escaped."""
    sys.stderr.write(safe(" ".join(line.split())) + "\n")

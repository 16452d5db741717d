"""The one exception type the command line turns into a one-line error and a non-zero exit, the function
that prints such a line, and the exit codes of every command (README: exit codes; `gpucheckup --help`)."""

import sys

from gpucheckup.safe_text import safe

EXIT_OK = 0
EXIT_BAD_INPUT = 2  # bad input or usage: one line says what and where (argparse's usage errors are 2 as well)
EXIT_FAILED_CONDITION = 3  # a gate fired: --fail-on, --fail-if, compare --fail-if-slower (one line each)
EXIT_NOT_WRITTEN = 4  # a file an output option named could not be written (one line names it and says why)
EXIT_INTERNAL = 70  # a bug (EX_SOFTWARE): one line, the traceback with --debug
EXIT_BROKEN_PIPE = 1  # the reader of stdout went away (`| head`): quietly, as Python and rich's Console exit
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


class CheckupError(Exception):
    """Bad input or an impossible request, said in one line a user can act on."""


def say(line: str) -> None:
    """One unwrapped line on stderr (no Rich: an error must print even when rendering fails); control and bidi
    characters from a path or a trace shown escaped."""
    sys.stderr.write(safe(" ".join(line.split())) + "\n")

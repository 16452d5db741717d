"""The `gpucheckup` command line: parser.py parses every command, commands.py runs them, emit.py prints
and writes every check-up. Importing it imports the standard library only (`gpucheckup --help` is fast)."""

from __future__ import annotations

import sys

from gpucheckup.cli.parser import build_parser
from gpucheckup.errors import CheckupError, say

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input is one line on stderr and exit 2, never a traceback (unless --debug)."""
    args = build_parser().parse_args(argv)
    try:
        from rich.console import Console

        to_stderr = str(getattr(args, "json", None)) == "-"  # `--json -`: stdout holds the JSON alone
        return args.func(args, Console(highlight=False, stderr=to_stderr))
    except CheckupError as e:
        say(f"gpucheckup: error: {e}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        say("gpucheckup: interrupted")
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - one line, not a traceback, unless --debug
        if args.debug:
            raise
        say(f"gpucheckup: internal error: {type(e).__name__}: {e} (run with --debug for details)")
        return EXIT_INTERNAL


__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())

"""The one exception type the command line turns into a one-line error and a non-zero exit."""


class CheckupError(Exception):
    """Bad input or an impossible request, said in one line a user can act on."""

"""Errors psgd reports to the user as one line, without a traceback."""


class UsageError(ValueError):
    """Bad input from the user: reported as one line, no traceback."""


class CollectiveError(RuntimeError):
    """A failure that every rank of a communicator agreed on and raises together."""

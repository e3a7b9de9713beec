"""What psgd's command lines share (the worker, psgd.train.newbob, the Kaldi
tools): one-line argument errors, Kaldi's spelling of booleans, finite
numbers, and the tools' one error path: any failure is one line
`PROG: error: ...` and a non-zero exit, never a traceback (set
PSGD_TRACEBACK=1 to see one when debugging psgd itself)."""
import argparse
import math
import sys
import traceback

from . import settings
from .atomic import WriteError
from .errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit status 2, not a usage wall."""

    def error(self, message):
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog, message))
        sys.exit(2)


def boolean(text):
    """--binary false, as Kaldi's tools spell it."""
    value = {"true": True, "1": True, "false": False, "0": False}.get(str(text).lower())
    if value is None:
        raise argparse.ArgumentTypeError("expected true or false, got %r" % (text,))
    return value


def finite(text):
    """A float flag's value that must be a finite number (not nan, not inf)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError("invalid float value: %r" % (text,)) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError("%r is not a finite number" % (text,))
    return value


def describe(exc):
    """One line for any failure: a UsageError is the user's own text; an
    OSError names its file (a write error from psgd.atomic names its target)."""
    if isinstance(exc, (UsageError, WriteError)):
        return str(exc)
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        return "%s: %s" % (exc.filename, reason) if exc.filename is not None else reason
    text = str(exc).splitlines()[0] if str(exc) else ""
    return "%s%s" % (type(exc).__name__, ": " + text if text else "")


def run(prog, action, args):
    try:
        action(args)
    except UsageError as exc:
        sys.stderr.write("%s: error: %s\n" % (prog, describe(exc)))
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:   # the tools' one error path: nothing escapes as a traceback
        if settings.get("PSGD_TRACEBACK"):
            traceback.print_exc()
        sys.stderr.write("%s: error: %s\n" % (prog, describe(exc)))
        return 1
    return 0

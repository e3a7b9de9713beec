"""What the two Kaldi command lines share: one-line argument errors, Kaldi's
spelling of booleans, and a bad input reported as one line, exit status 2."""
import argparse
import sys

from psgd.errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog, message))
        sys.exit(2)


def boolean(text):
    """--binary false, as Kaldi's tools spell it."""
    value = {"true": True, "1": True, "false": False, "0": False}.get(str(text).lower())
    if value is None:
        raise argparse.ArgumentTypeError("expected true or false, got %r" % (text,))
    return value


def run(prog, action, args):
    try:
        action(args)
    except UsageError as exc:
        sys.stderr.write("%s: error: %s\n" % (prog, exc))
        return 2
    return 0

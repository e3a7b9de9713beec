"""An algorithm option: its default, check and help; the declared options of
an algorithm are the only source of its flags, defaults and resume rules."""
import math
import numbers

import numpy as np

from ..errors import UsageError


class Option:
    """One algorithm option, declared once: its default (a value, or a
    function of N), its kind (float, int, bool, or a tuple of choices), a
    check that returns an error text or None, and its help. The command line
    derives its flag from this (psgd/train/algorithm_flags.py): `--name`, or
    `--flag` where the name alone would be ambiguous; flag=False keeps it
    to the Python API. `applies`, a function of all the resolved options,
    says why a value given for this one would be ignored (or None): giving
    it there is an error, never a silent no-op."""

    def __init__(self, default, check=None, kind=float, help=None, flag=None, applies=None):
        self.default, self.check, self.kind = default, check, kind
        self.help, self.flag, self.applies = help, flag, applies

    def resolve(self, name, value, N):
        if value is None:
            value = self.default(N) if callable(self.default) else self.default
        if self.kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise UsageError("option %s must be true or false, got %r" % (name, value))
            value = bool(value)
        elif self.kind in (float, int):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise UsageError("option %s must be a number, got %r" % (name, value))
            if self.kind is int and int(value) != value:
                raise UsageError("option %s must be an integer, got %r" % (name, value))
            value = self.kind(value)
            if self.kind is float and not math.isfinite(value):
                raise UsageError("option %s must be finite, got %r" % (name, value))
        elif isinstance(self.kind, tuple):
            if value not in self.kind:
                raise UsageError("option %s must be one of %s, got %r" % (
                    name, ", ".join(self.kind), value))
        problem = self.check(value) if self.check else None
        if problem:
            raise UsageError("option %s=%r: %s" % (name, value, problem))
        return value


def positive(v):
    return None if v > 0 else "must be > 0"

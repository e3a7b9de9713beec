"""Kaldi rspecifiers: "ark:f.ark", "ark,t:f.txt", "scp:feats.scp", "ark:cmd |".

A plain path is accepted too: a .scp name means a script file, anything
else an archive (binary or text, detected from its bytes).
"""
from collections import namedtuple

from psgd.errors import UsageError

# Kaldi's read options; psgd treats them as hints (sortedness is not needed,
# text vs binary is detected), so they are parsed, checked and kept.
_OPTIONS = {"t", "b", "p", "o", "s", "cs", "ns", "no", "np", "f", "nf"}


class Rspecifier(namedtuple("Rspecifier", "kind path options")):
    """kind: 'ark' or 'scp'; path: file name, '-' or a command ending in '|'."""

    @property
    def is_stream(self):
        """True for stdin and pipes: read once, front to back, no seeking."""
        p = self.path.strip()
        return p == "-" or p.endswith("|") or p.startswith("|")

    @property
    def text(self):
        return "t" in self.options

    def __str__(self):
        return ",".join((self.kind,) + tuple(sorted(self.options))) + ":" + self.path


def parse_rspecifier(spec):
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError("empty Kaldi rspecifier %r" % (spec,))
    head, sep, path = spec.partition(":")
    words = head.split(",")
    kinds = [w for w in words if w in ("ark", "scp")]
    if sep and kinds and all(w in _OPTIONS or w in ("ark", "scp") for w in words):
        if len(kinds) != 1:
            raise UsageError("rspecifier %r: give exactly one of ark or scp" % spec)
        if not path.strip():
            raise UsageError("rspecifier %r names no file" % spec)
        return Rspecifier(kinds[0], path.strip(), frozenset(w for w in words if w in _OPTIONS))
    if sep and kinds:
        bad = sorted(w for w in words if w not in _OPTIONS and w not in ("ark", "scp"))
        raise UsageError("rspecifier %r: unknown option(s) %s" % (spec, ",".join(bad)))
    kind = "scp" if spec.strip().endswith(".scp") else "ark"
    return Rspecifier(kind, spec.strip(), frozenset())

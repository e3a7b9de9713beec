"""Kaldi's basic I/O encodings (src/base/io-funcs, src/matrix/kaldi-matrix),
binary and text, for tokens, integers, floats, vectors and matrices.

Binary (a file that starts with "\\0B"):
    token           the characters, then one space ("<Nnet> ", "FM ")
    int32           a size byte 0x04, then 4 bytes little-endian
    float           a size byte 0x04 (float) or 0x08 (double), then the value
    vector          token "FV" (or "DV"), int32 dim, dim raw values
    matrix          token "FM" (or "DM"), int32 rows, int32 cols, rows*cols raw
    integer vector  a size byte 0x04, a raw int32 count (no size byte), raw values
Text: the same tokens and numbers separated by spaces, floats with 7
significant digits (C++'s default stream precision after Kaldi's set-up),
vectors " [ v0 v1 ... ]\\n", matrices " [\\n  row0 \\n  row1 ]\\n", integer
vectors "[ i0 i1 ... ]\\n".

Every malformed or truncated input raises KaldiFormatError: one line naming
the file, what was expected and the byte offset.
"""
import builtins
import struct

import numpy as np

from psgd.errors import UsageError

BINARY_HEADER = b"\0B"
_WHITESPACE = b" \t\n\r\f\v"


class KaldiFormatError(UsageError):
    """A Kaldi file psgd cannot read: one line, no traceback."""


def format_float(value):
    """A float as C++'s `os << f` writes it with precision 7 (printf %.7g)."""
    return "%.7g" % float(value)


def _floats_text(values):
    """ "v0 v1 ... " in format_float's spelling (tolist: Python floats format fastest)."""
    return "".join(["%.7g " % v for v in values.tolist()])


class Writer:
    """Accumulates one Kaldi object (binary or text) in memory."""

    def __init__(self, binary=True, header=True):
        self.binary = bool(binary)
        self._parts = [BINARY_HEADER] if self.binary and header else []

    def getvalue(self):
        return b"".join(self._parts)

    def _put(self, data):
        self._parts.append(data if isinstance(data, bytes) else data.encode("ascii"))

    def newline(self):
        """Text mode's line break between fields (binary writes none)."""
        if not self.binary:
            self._put("\n")

    def token(self, token):
        if not token or any(c.isspace() for c in token):
            raise ValueError("a Kaldi token is non-empty without spaces, got %r" % (token,))
        self._put(token + " ")

    def int32(self, value):
        if self.binary:
            self._put(b"\x04" + struct.pack("<i", int(value)))
        else:
            self._put("%d " % int(value))

    def float(self, value):
        if self.binary:
            self._put(b"\x04" + struct.pack("<f", float(value)))
        else:
            self._put(format_float(value) + " ")

    def vector(self, values):
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        if self.binary:
            self.token("FV")
            self.int32(len(values))
            self._put(values.astype("<f4").tobytes())
        else:
            self._put(" [ " + _floats_text(values) + "]\n")

    def matrix(self, values):
        values = np.asarray(values, dtype=np.float32)
        if values.ndim != 2:
            raise ValueError("a Kaldi matrix is 2-D, got shape %s" % (values.shape,))
        rows, cols = values.shape
        if self.binary:
            self.token("FM")
            self.int32(rows)
            self.int32(cols)
            self._put(np.ascontiguousarray(values, dtype="<f4").tobytes())
        elif cols == 0:
            self._put(" [ ]\n")
        else:
            lines = ("\n  " + _floats_text(row) for row in values)
            self._put(" [" + "".join(lines) + "]\n")

    def int_vector(self, values):
        values = [int(v) for v in values]
        if self.binary:
            self._put(b"\x04" + struct.pack("<i", len(values)))
            self._put(np.asarray(values, dtype="<i4").tobytes())
        else:
            self._put("[ " + "".join("%d " % v for v in values) + "]\n")


class Reader:
    """Reads one Kaldi object from bytes; binary when they start with "\\0B"."""

    def __init__(self, data, name):
        self.data = bytes(data)
        self.name = name
        self.binary = self.data.startswith(BINARY_HEADER)
        self.pos = 2 if self.binary else 0

    # --- errors ----------------------------------------------------------------
    def fail(self, problem):
        raise KaldiFormatError("%s: %s (byte %d)" % (self.name, problem, self.pos))

    def _truncated(self, what):
        self.fail("truncated: the file ends inside %s" % what)

    def _take(self, count, what):
        if self.pos + count > len(self.data):
            self._truncated(what)
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    # --- tokens ------------------------------------------------------------------
    def _skip_space(self):
        data, n = self.data, len(self.data)
        while self.pos < n and data[self.pos] in _WHITESPACE:
            self.pos += 1

    def peek(self):
        """The next character (text mode skips whitespace first), '' at the end."""
        if not self.binary:
            self._skip_space()
        return chr(self.data[self.pos]) if self.pos < len(self.data) else ""

    def peek_token(self):
        """Kaldi's PeekToken: the character after a '<' (the next one otherwise)."""
        first = self.peek()
        if first != "<":
            return first
        return chr(self.data[self.pos + 1]) if self.pos + 1 < len(self.data) else ""

    def at_end(self):
        self._skip_space()
        return self.pos >= len(self.data)

    def token(self, what="a token"):
        if not self.binary:
            self._skip_space()
        start, data, n = self.pos, self.data, len(self.data)
        if start >= n:
            self._truncated(what)
        end = start
        while end < n and data[end] not in _WHITESPACE:
            end += 1
        if end >= n:
            # a token always ends with a space in Kaldi's files; allow a bare
            # last token of a hand-written text file
            if self.binary:
                self._truncated(what)
        self.pos = min(end + 1, n)
        try:
            return data[start:end].decode("ascii")
        except UnicodeDecodeError:
            self.pos = start
            self.fail("expected %s, found non-text bytes" % what)

    def expect(self, token):
        start = self.pos
        got = self.token("the token %s" % token)
        if got != token:
            self.pos = start
            self.fail("expected %s, found %r" % (token, got[:40]))

    # --- numbers -----------------------------------------------------------------
    def int32(self, what="an integer"):
        if self.binary:
            size = self._take(1, what)[0]
            if size != 4:
                self.pos -= 1
                self.fail("expected %s (size byte 4), found size byte %d" % (what, size))
            return struct.unpack("<i", self._take(4, what))[0]
        text = self.token(what)
        try:
            return int(text)
        except ValueError:
            self.fail("expected %s, found %r" % (what, text[:40]))

    def float(self, what="a number"):
        if self.binary:
            size = self._take(1, what)[0]
            if size == 4:
                return struct.unpack("<f", self._take(4, what))[0]
            if size == 8:
                return struct.unpack("<d", self._take(8, what))[0]
            self.pos -= 1
            self.fail("expected %s (size byte 4 or 8), found size byte %d" % (what, size))
        text = self.token(what)
        try:
            return float(text)
        except ValueError:
            self.fail("expected %s, found %r" % (what, text[:40]))

    # --- arrays ------------------------------------------------------------------
    def _binary_array(self, float_token, double_token, shape_count, what):
        token = self.token(what)
        if token not in (float_token, double_token):
            self.fail("expected %s (%s), found %r" % (what, float_token, token[:40]))
        shape = tuple(self.int32("the size of %s" % what) for _ in range(shape_count))
        if any(d < 0 for d in shape):
            self.fail("%s has a negative size %s" % (what, shape))
        dtype = "<f4" if token == float_token else "<f8"
        count = int(np.prod(shape))
        raw = self._take(count * np.dtype(dtype).itemsize, what)
        return np.frombuffer(raw, dtype=dtype).astype(np.float32).reshape(shape)

    def _bracketed(self, what):
        """The text between '[' and ']' (text mode)."""
        self._skip_space()
        if self.pos >= len(self.data):
            self._truncated(what)
        if self.data[self.pos:self.pos + 1] != b"[":
            self.fail("expected '[' opening %s, found %r"
                      % (what, self.data[self.pos:self.pos + 10].decode("latin-1")))
        end = self.data.find(b"]", self.pos)
        if end < 0:
            self._truncated(what)
        body = self.data[self.pos + 1:end].decode("latin-1")
        self.pos = end + 1
        return body

    def _numbers(self, text, what, kind=builtins.float):
        try:
            if kind is builtins.float:
                # numpy parses a list of numeric strings (inf and nan too) in C
                return np.asarray(text.split(), dtype=np.float64).tolist()
            return [kind(v) for v in text.split()]
        except ValueError as exc:
            self.fail("%s holds a non-number (%s)" % (what, exc))

    def vector(self, what="a vector"):
        if self.binary:
            return self._binary_array("FV", "DV", 1, what)
        return np.asarray(self._numbers(self._bracketed(what), what), dtype=np.float32)

    def matrix(self, what="a matrix"):
        if self.binary:
            return self._binary_array("FM", "DM", 2, what)
        body = self._bracketed(what)
        rows = [self._numbers(line, what) for line in body.replace(";", "\n").split("\n")]
        rows = [r for r in rows if r]
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        if len({len(r) for r in rows}) != 1:
            self.fail("%s has rows of different lengths %s"
                      % (what, sorted({len(r) for r in rows})))
        return np.asarray(rows, dtype=np.float32)

    def int_vector(self, what="an integer vector"):
        if self.binary:
            size = self._take(1, what)[0]
            if size != 4:
                self.pos -= 1
                self.fail("expected %s of int32 (size byte 4), found %d" % (what, size))
            count = struct.unpack("<i", self._take(4, what))[0]
            if count < 0:
                self.fail("%s has a negative length" % what)
            return [int(v) for v in np.frombuffer(self._take(4 * count, what), dtype="<i4")]
        return self._numbers(self._bracketed(what), what, kind=int)

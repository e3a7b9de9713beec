"""Kaldi's basic I/O for tests, written from Kaldi's sources (kaldi-asr/kaldi)
and nothing of psgd's: src/base/io-funcs.cc and io-funcs-inl.h (tokens, int32,
float, integer vectors, the "\\0B" binary header), src/matrix/kaldi-vector.cc
and kaldi-matrix.cc (Vector<float>/Matrix<float> Read and Write).

`Input` reads bytes as Kaldi's std::istream code does and records each item
it takes as (kind, value); `Output` writes them as Kaldi's std::ostream code
does (text with precision 7); `encode` turns an item sequence into bytes.
"""
import struct

import numpy as np


class KaldiError(Exception):
    """What KALDI_ERR would print."""


# --- src/base/io-funcs.cc and io-funcs-inl.h, src/matrix (reading) -------------------
class Input:
    """A byte stream read as Kaldi's std::istream code reads it."""

    def __init__(self, data):
        self.data = bytes(data)
        self.binary = self.data[:2] == b"\0B"      # InitKaldiInputStream
        self.pos = 2 if self.binary else 0
        self.items = []

    def _char(self, offset=0):
        i = self.pos + offset
        return chr(self.data[i]) if i < len(self.data) else None

    def _ws(self):                                 # is >> std::ws
        while self._char() is not None and self._char().isspace():
            self.pos += 1

    def _word(self):                               # is >> std::string
        self._ws()
        start = self.pos
        while self._char() is not None and not self._char().isspace():
            self.pos += 1
        if self.pos == start:
            raise KaldiError("EOF where a token was expected, at %d" % start)
        return self.data[start:self.pos].decode("latin-1")

    def _raw(self, count):
        if self.pos + count > len(self.data):
            raise KaldiError("stream ends at %d, %d bytes wanted" % (len(self.data), count))
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    def peek(self):                                # Peek
        if not self.binary:
            self._ws()
        return self._char()

    def peek_token(self):                          # PeekToken
        if not self.binary:
            self._ws()
        return self._char(1) if self._char() == "<" else self._char()

    def read_token(self):                          # ReadToken
        token = self._word()
        if self._char() is None or not self._char().isspace():
            raise KaldiError("ReadToken, expected space after token %r" % token)
        self.pos += 1
        self.items.append(("token", token))
        return token

    def expect_token(self, token):                 # ExpectToken
        got = self.read_token()
        if got != token:
            raise KaldiError('Expected token "%s", got instead "%s".' % (token, got))

    def read_int32(self):                          # ReadBasicType<int32>
        if self.binary:
            if self._raw(1) != b"\x04":
                raise KaldiError("ReadBasicType: did not get expected integer type")
            value = struct.unpack("<i", self._raw(4))[0]
        else:
            word = self._word()
            try:
                value = int(word)
            except ValueError:
                raise KaldiError("Read failure in ReadBasicType, got %s" % word) from None
        self.items.append(("int32", value))
        return value

    def read_float(self):                          # ReadBasicType<float>
        if self.binary:
            size = self._raw(1)
            if size == b"\x04":
                value = struct.unpack("<f", self._raw(4))[0]
            elif size == b"\x08":
                value = float(np.float32(struct.unpack("<d", self._raw(8))[0]))
            else:
                raise KaldiError("ReadBasicType: expected float, saw %r" % size)
        else:
            value = float(np.float32(self._word()))
        self.items.append(("float", value))
        return value

    def _binary_floats(self, shape_count, float_token, double_token):
        token = self._word()
        self.pos += 1                               # the space after the token
        if token not in (float_token, double_token):
            raise KaldiError("Expected token %s, got %s" % (float_token, token))
        shape = []
        for _ in range(shape_count):
            if self._raw(1) != b"\x04":
                raise KaldiError("ReadBasicType: did not get expected integer type")
            shape.append(struct.unpack("<i", self._raw(4))[0])
        dtype = np.dtype("<f4" if token == float_token else "<f8")
        count = int(np.prod(shape))
        return np.frombuffer(self._raw(count * dtype.itemsize), dtype).astype(np.float32) \
            .reshape(shape)

    def read_vector(self):                         # Vector<float>::Read
        if self.binary:
            v = self._binary_floats(1, "FV", "DV")
        else:
            first = self._word()
            if first == "[]":
                v = np.zeros(0, np.float32)
            elif first != "[":
                raise KaldiError('Expected "[" but got %s' % first)
            else:
                values = []
                while True:
                    self._skip_blanks()
                    c = self._char()
                    if c == "]":
                        self.pos += 1
                        break
                    if c in ("\n", "\r"):
                        raise KaldiError("Newline found while reading vector")
                    if c is None:
                        raise KaldiError("EOF while reading vector data")
                    values.append(self._number())
                v = np.asarray(values, np.float32)
            if self._char() == "\n":
                self.pos += 1
        self.items.append(("vector", v))
        return v

    def read_matrix(self):                         # Matrix<float>::Read
        if self.binary:
            m = self._binary_floats(2, "FM", "DM")
        else:
            first = self._word()
            if first == "[]":
                m = np.zeros((0, 0), np.float32)
            elif first != "[":
                raise KaldiError('Expected "[", got "%s"' % first)
            else:
                rows, row = [], []
                while True:
                    c = self._char()
                    if c is None:
                        raise KaldiError("Got EOF while reading matrix data")
                    if c == "]":
                        self.pos += 1
                        break
                    if c in "\n;":
                        self.pos += 1
                        if row:
                            rows.append(row)
                            row = []
                    elif c.isspace():
                        self.pos += 1
                    else:
                        row.append(self._number())
                if row:
                    rows.append(row)
                if len({len(r) for r in rows}) > 1:
                    raise KaldiError("Matrix has inconsistent #cols")
                m = np.asarray(rows, np.float32).reshape(len(rows), -1 if rows else 0)
            if self._char() == "\n":
                self.pos += 1
        self.items.append(("matrix", m))
        return m

    def _skip_blanks(self):
        while self._char() in (" ", "\t"):
            self.pos += 1

    def _number(self):
        """`is >> r` where a number starts with a digit or '-'; else inf or nan only."""
        start = self.pos
        while self._char() is not None and not self._char().isspace() and self._char() != "]":
            self.pos += 1
        text = self.data[start:self.pos].decode("latin-1")
        if text[0] not in "-0123456789" and text.lower() not in ("inf", "infinity", "nan"):
            raise KaldiError("Expecting numeric data, got %s" % text)
        try:
            return float(np.float32(text))
        except ValueError:
            raise KaldiError("Failed to read number %s" % text) from None

    def read_int_vector(self):                     # ReadIntegerVector<int32>
        if self.binary:
            if self._raw(1) != b"\x04":
                raise KaldiError("ReadIntegerVector: expected to see type of size 4")
            n = struct.unpack("<i", self._raw(4))[0]
            v = [int(x) for x in np.frombuffer(self._raw(4 * n), "<i4")]
        else:
            self._ws()
            if self._char() != "[":
                raise KaldiError("ReadIntegerVector: expected to see [")
            self.pos += 1
            v = []
            while True:
                self._ws()
                if self._char() == "]":
                    self.pos += 1
                    break
                v.append(int(self._word()))
        self.items.append(("ivector", v))
        return v


# --- src/base/io-funcs.cc and io-funcs-inl.h, src/matrix (writing) -------------------
class Output:
    """Bytes written as Kaldi's std::ostream code writes them (precision 7)."""

    def __init__(self, binary):
        self.binary = binary
        self.parts = [b"\0B"] if binary else []   # InitKaldiOutputStream

    def bytes(self):
        return b"".join(self.parts)

    def _put(self, text):
        self.parts.append(text if isinstance(text, bytes) else text.encode("ascii"))

    def endl(self):                                # `if (!binary) os << "\n"`
        if not self.binary:
            self._put("\n")

    @staticmethod
    def _f(value):                                 # os << float, precision 7
        return "%.7g" % float(np.float32(value))

    def token(self, token):                        # WriteToken
        self._put(token + " ")

    def int32(self, value):                        # WriteBasicType<int32>
        self._put(b"\x04" + struct.pack("<i", value) if self.binary else "%d " % value)

    def float(self, value):                        # WriteBasicType<float>
        self._put(b"\x04" + struct.pack("<f", value) if self.binary
                  else self._f(value) + " ")

    def vector(self, v):                           # VectorBase<float>::Write
        v = np.asarray(v, np.float32)
        if self.binary:
            self.token("FV")
            self.int32(v.size)
            self._put(v.astype("<f4").tobytes())
        else:
            self._put(" [ " + "".join(self._f(x) + " " for x in v) + "]\n")

    def matrix(self, m):                           # MatrixBase<float>::Write
        m = np.asarray(m, np.float32)
        if self.binary:
            self.token("FM")
            self.int32(m.shape[0])
            self.int32(m.shape[1])
            self._put(m.astype("<f4").tobytes())
        elif m.shape[1] == 0:
            self._put(" [ ]\n")
        else:
            self._put(" [" + "".join("\n  " + "".join(self._f(x) + " " for x in row)
                                     for row in m) + "]\n")

    def int_vector(self, v):                       # WriteIntegerVector<int32>
        if self.binary:
            self._put(b"\x04" + struct.pack("<i", len(v)) + np.asarray(v, "<i4").tobytes())
        else:
            self._put("[ " + "".join("%d " % x for x in v) + "]\n")



def encode(items, binary):
    """Bytes of an item sequence as read_nnet returns it, plus ("endl",) where a
    writer puts `if (!binary) os << "\\n"` / std::endl."""
    o = Output(binary)
    put = {"token": o.token, "int32": o.int32, "float": o.float, "vector": o.vector,
           "matrix": o.matrix, "ivector": o.int_vector}
    for item in items:
        if item[0] == "endl":
            o.endl()
        else:
            put[item[0]](item[1])
    return o.bytes()

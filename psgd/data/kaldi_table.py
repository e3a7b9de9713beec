"""Reading Kaldi tables (ark / scp) through kaldiio, a shard at a time.

Every kaldiio failure (missing file, truncated or corrupt archive, bad scp
line) comes out as one UsageError line naming the file and the problem.

A script file (scp) lists ids and locations, so a worker reads only the
entries of its shard. An archive has no index: it is scanned once to learn
ids and byte offsets (matrices are parsed and dropped as the scan goes, so
memory holds one utterance at a time), then the shard is read by seeking.
A piped archive cannot seek and is scanned a second time instead.
"""
import struct
import warnings
from contextlib import contextmanager

import numpy as np

from psgd.data.rspecifier import parse_rspecifier
from psgd.errors import UsageError


def _kaldiio():
    try:
        import kaldiio
        import kaldiio.matio
    except ImportError:
        raise UsageError("reading Kaldi data needs the kaldiio package: pip install kaldiio") \
            from None
    # kaldiio unpickles an archive entry tagged PKL, running whatever code it
    # names: a file a user gives us is only ever read.
    kaldiio.matio.pickle = _NoPickle
    return kaldiio


class _Pickled(ValueError):
    pass


class _NoPickle:
    """Stands in for the pickle module inside kaldiio.matio."""

    @staticmethod
    def load(*args, **kwargs):
        raise _Pickled()

    @staticmethod
    def dump(*args, **kwargs):
        raise _Pickled()


_CORRUPT = (struct.error, ValueError, AssertionError, EOFError, RuntimeError,
            IndexError, TypeError, UnicodeDecodeError)


def kaldi_error(where, exc):
    """The UsageError (one line) for an exception raised while reading `where`."""
    if isinstance(exc, UsageError):
        return exc
    if isinstance(exc, _Pickled):
        problem = "a pickled Python object, which psgd never loads (Kaldi matrices only)"
    elif isinstance(exc, FileNotFoundError):
        problem = "no such file %r" % (exc.filename,) if exc.filename else "no such file"
    elif isinstance(exc, IsADirectoryError):
        problem = "is a directory, not a file"
    elif isinstance(exc, PermissionError):
        problem = "permission denied"
    elif isinstance(exc, OSError):
        problem = "cannot read (%s)" % (exc.strerror or exc)
    else:
        detail = str(exc).strip().splitlines()
        detail = " (%s)" % detail[0][:100] if detail else ""
        problem = "truncated or corrupt Kaldi data%s" % detail
    return UsageError("%s: %s" % (where, problem))


def _scan(fd, where):
    """(key, offset, array) for each entry of an open archive; offset of the value."""
    matio = _kaldiio().matio
    key = None
    try:
        while True:
            key = matio.read_token(fd)
            if key is None:
                return
            offset = fd.tell() if fd.seekable() else None
            yield key, offset, matio.read_kaldi(fd)
    except _CORRUPT + (OSError,) as e:
        at = where if key is None else "%s (at utterance %s)" % (where, key)
        raise kaldi_error(at, e) from None


@contextmanager
def _reading(rspec):
    """An open archive; for a pipe, a failed command is an error too."""
    if rspec.path.strip() == "-":
        raise UsageError("%s: cannot read a sharded table from stdin; "
                         "write it to a file or list it in an scp" % rspec.path)
    try:
        fd = _kaldiio().open_like_kaldi(rspec.path, "rb")
    except OSError as e:
        raise kaldi_error(rspec.path, e) from None
    try:
        yield fd
    except BaseException:
        fd.close()
        raise
    # Only kaldiio's pipe wrapper returns a status: the command's, shifted by 8.
    status = fd.close()
    if status:
        raise UsageError("%s: command failed with exit status %d" % (rspec.path, status >> 8))


class _Scp:
    """Entries read by id through kaldiio's lazy scp dictionary."""

    def __init__(self, rspec):
        self.where = rspec.path
        try:
            self.lazy = _kaldiio().load_scp(rspec.path)
        except (OSError,) + _CORRUPT as e:
            raise kaldi_error(self.where, e) from None
        if len(self.lazy) == 0:
            raise UsageError("%s: empty scp file (no utterances)" % self.where)
        _refuse_duplicate_ids(self.where)
        self.keys = sorted(self.lazy)

    def read(self, keys, convert):
        out = {}
        for key in keys:
            if key not in self.lazy:
                continue
            where = "%s: utterance %s" % (self.where, key)
            try:
                with warnings.catch_warnings():
                    # kaldiio warns before re-raising; the UsageError says it all.
                    warnings.simplefilter("ignore")
                    value = self.lazy[key]
            except (OSError,) + _CORRUPT as e:
                raise kaldi_error(where, e) from None
            out[key] = convert(where, value)
        return out


def _refuse_duplicate_ids(path):
    """kaldiio's scp dictionary keeps the last of two lines with one id: refuse it."""
    first = {}
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split(None, 1)
                if not parts:
                    continue
                if parts[0] in first:
                    raise UsageError("%s:%d: utterance id %s appears twice (first on line %d)"
                                     % (path, lineno, parts[0], first[parts[0]]))
                first[parts[0]] = lineno
    except OSError as e:
        raise kaldi_error(path, e) from None


class _Ark:
    """Entries of an archive: indexed by one scan, read back by offset."""

    def __init__(self, rspec, convert):
        self.rspec, self.where = rspec, rspec.path
        self.offsets = {}
        with _reading(rspec) as fd:
            for key, offset, value in _scan(fd, self.where):
                if key in self.offsets:
                    raise UsageError("%s: utterance id %s appears twice" % (self.where, key))
                convert("%s: utterance %s" % (self.where, key), value)
                self.offsets[key] = offset
        self.keys = sorted(self.offsets)

    def read(self, keys, convert):
        wanted = [k for k in keys if k in self.offsets]
        if self.rspec.is_stream:
            return self._rescan(set(wanted), convert)
        matio = _kaldiio().matio
        out = {}
        # Read in file order so the disk sees one forward sweep.
        with _reading(self.rspec) as fd:
            for key in sorted(wanted, key=self.offsets.get):
                where = "%s: utterance %s" % (self.where, key)
                try:
                    fd.seek(self.offsets[key])
                    out[key] = convert(where, matio.read_kaldi(fd))
                except (OSError,) + _CORRUPT as e:
                    raise kaldi_error(where, e) from None
        return out

    def _rescan(self, wanted, convert):
        out = {}
        with _reading(self.rspec) as fd:
            for key, _, value in _scan(fd, self.where):
                if key in wanted:
                    out[key] = convert("%s: utterance %s" % (self.where, key), value)
        return out


class FeatureTable:
    """Sorted utterance ids of a matrix table and reads of any subset of them."""

    def __init__(self, rspecifier):
        self.rspec = parse_rspecifier(rspecifier)
        self._dims = set()
        if self.rspec.kind == "scp":
            self._table = _Scp(self.rspec)
        else:
            # The scan checks each matrix and drops it at once.
            self._table = _Ark(self.rspec, self._check)
            if not self._table.keys:
                raise UsageError("%s: empty archive (no utterances)" % self.rspec.path)
        self.keys = self._table.keys

    def _check(self, where, value):
        # kaldiio types a text matrix by its first number, so whole-valued
        # text features come back as integers: accept those too.
        if not isinstance(value, np.ndarray) or value.ndim != 2 \
                or value.dtype.kind not in "fiu":
            raise UsageError("%s: expected a matrix of features, got %s"
                             % (where, _describe(value)))
        if value.shape[1] == 0:
            raise UsageError("%s: a feature matrix with 0 columns" % where)
        self._dims.add(value.shape[1])

    def read(self, keys):
        """{id: float32 (frames, dim)} for the ids of `keys` present in the table."""
        def convert(where, value):
            self._check(where, value)
            return np.asarray(value, dtype=np.float32)
        return self._table.read(keys, convert)

    def dim(self):
        """The feature dimension (reading one entry of an scp if nothing was read yet)."""
        if not self._dims:
            self.read(self.keys[:1])
        if len(self._dims) > 1:
            raise UsageError("%s: utterances have different feature dimensions %s"
                             % (self.rspec.path, sorted(self._dims)))
        return next(iter(self._dims))


def read_int_vectors(rspecifier, keys):
    """{id: int64 vector} for the ids of `keys` found in an ark/scp of int vectors.

    An archive is scanned once, keeping only the wanted entries.
    """
    rspec = parse_rspecifier(rspecifier)
    wanted = set(keys)
    if rspec.kind == "scp":
        return _Scp(rspec).read(sorted(wanted), to_labels)
    out = {}
    with _reading(rspec) as fd:
        for key, _, value in _scan(fd, rspec.path):
            if key in wanted:
                if key in out:
                    raise UsageError("%s: utterance id %s appears twice" % (rspec.path, key))
                out[key] = to_labels("%s: utterance %s" % (rspec.path, key), value)
    return out


def to_labels(where, value):
    """An int64 label vector, or a UsageError saying why `value` is not one."""
    if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype.kind not in "iu":
        raise UsageError("%s: targets must be a vector of integers, got %s"
                         % (where, _describe(value)))
    return value.astype(np.int64)


def _describe(value):
    if isinstance(value, np.ndarray):
        return "%s array of shape %s" % (value.dtype, value.shape)
    return type(value).__name__

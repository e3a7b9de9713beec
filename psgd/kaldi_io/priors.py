"""Class frame counts and the log priors nnet-forward subtracts.

ali_train_pdf.counts is a Kaldi text vector "[ c0 c1 ... ]" of how many
training frames each class (pdf) has; `nnet-forward --class-frame-counts`
turns it into log priors (src/nnet/nnet-pdf-prior.cc): counts below the
cutoff (default 1e-10) are raised to it and their prior made huge
(FLT_MAX/2), so such classes get a vanishing likelihood instead of a NaN.
"""
import numpy as np

from psgd.errors import UsageError

from ..atomic import atomic_write_bytes
from .encoding import Reader
from .nnet1 import read_bytes

FLT_MAX = float(np.finfo(np.float32).max)


def encode_counts(counts):
    return ("[ " + "".join("%d " % int(c) for c in counts) + "]\n").encode("ascii")


def write_counts(path, counts):
    atomic_write_bytes(path, encode_counts(counts))


def read_counts(path):
    """The counts in `path`; counts that are no frame counts (negative, NaN,
    or none above zero) are refused: their priors would be NaN."""
    data = read_bytes(path)
    reader = Reader(data, path)
    if reader.binary:
        counts = reader.vector("the class frame counts").astype(np.float64)
    else:
        body = reader._bracketed("the class frame counts")
        counts = np.asarray(reader._numbers(body, "the class frame counts"), dtype=np.float64)
    if not (np.isfinite(counts).all() and (counts >= 0).all() and counts.sum() > 0):
        raise UsageError("%s: class frame counts must be finite, >= 0 and not all 0"
                         % path)
    return counts


def log_priors(counts, cutoff=1e-10):
    counts = np.asarray(counts, dtype=np.float64).copy()
    low = counts < cutoff
    counts[low] = cutoff
    priors = np.log(counts / counts.sum())
    priors = priors.astype(np.float32)
    priors[low] += np.float32(FLT_MAX / 2)
    return priors

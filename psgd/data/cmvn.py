"""Global cepstral mean and variance normalisation from summable statistics.

A worker sees only its shard, so it computes (count, sum, sum of squares)
per raw feature dimension; the trainer Allreduces `stats.pack()` (SUM),
rebuilds the global statistics with `CmvnStats.unpack` and calls
`apply_cmvn`, which replaces whatever normalisation the data carries (the
local one load_kaldi applied) by the global one in a single affine pass.
Statistics are of unspliced frames; on spliced rows the same per-dimension
transform is repeated for each of the 2K+1 blocks, which is exact because
splicing only copies frames.
"""
from dataclasses import dataclass

import numpy as np

from psgd.backend import array_module, to_numpy
from psgd.errors import UsageError

VAR_FLOOR = 1e-10


@dataclass
class CmvnStats:
    count: float
    sum: np.ndarray      # (F,) float64
    sumsq: np.ndarray    # (F,) float64

    @classmethod
    def from_frames(cls, x):
        """Statistics of frames x (N, F), accumulated in float64 on x's device."""
        xp = array_module(x)
        x64 = x.astype(xp.float64)
        return cls(float(x.shape[0]), to_numpy(x64.sum(axis=0)), to_numpy((x64 * x64).sum(axis=0)))

    @property
    def dim(self):
        return len(self.sum)

    def pack(self):
        """[count, sum..., sumsq...] as one float64 vector for an Allreduce(SUM)."""
        return np.concatenate(([self.count], self.sum, self.sumsq)).astype(np.float64)

    @classmethod
    def unpack(cls, vector):
        v = np.asarray(vector, dtype=np.float64)
        dim = (len(v) - 1) // 2
        if len(v) != 2 * dim + 1:
            raise ValueError("CMVN statistics vector of odd length expected, got %d" % len(v))
        return cls(float(v[0]), v[1:dim + 1].copy(), v[dim + 1:].copy())

    def __add__(self, other):
        return CmvnStats(self.count + other.count, self.sum + other.sum,
                         self.sumsq + other.sumsq)

    def mean_std(self, var_floor=VAR_FLOOR):
        """(mean, std) per dimension; constant dimensions get std sqrt(var_floor)."""
        if self.count <= 0:
            raise UsageError("CMVN: no frames to compute the statistics from")
        mean = self.sum / self.count
        var = np.maximum(self.sumsq / self.count - mean * mean, var_floor)
        return mean, np.sqrt(var)


def normalize(x, mean, std, current=None, blocks=1):
    """In place: x -> (x_raw - mean) / std, where x_raw undoes `current`.

    current: the (mean, std) already applied to x, or None for raw features.
    blocks: 2K+1 for spliced rows.
    """
    if current is None:
        scale, shift = 1.0 / std, -mean / std
    else:
        scale, shift = current[1] / std, (current[0] - mean) / std
    xp = array_module(x)
    x *= xp.asarray(np.tile(scale, blocks), dtype=x.dtype)
    x += xp.asarray(np.tile(shift, blocks), dtype=x.dtype)
    return x


def apply_cmvn(dataset, stats, var_floor=VAR_FLOOR):
    """Normalise a Kaldi Dataset's train and test features with `stats` (in place).

    Returns the dataset, whose `cmvn` then records the (mean, std) applied.
    """
    blocks = 2 * dataset.splice + 1
    if stats.dim * blocks != dataset.input_shape[-1]:
        raise UsageError("CMVN statistics of dimension %d do not fit features of %d "
                         "with splice %d" % (stats.dim, dataset.input_shape[-1], dataset.splice))
    mean, std = stats.mean_std(var_floor)
    for x in (dataset.x_train, dataset.x_test):
        if x is not None and len(x):
            normalize(x, mean, std, dataset.cmvn, blocks)
    dataset.cmvn = (mean, std)
    return dataset

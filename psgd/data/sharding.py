"""Contiguous, near-equal shards: every worker reads only its own part.

Shards are plain (rank, size) integers so this file needs no MPI; the same
split is computed independently, and identically, on every rank.
"""
import numpy as np

from psgd.errors import UsageError


def _check(n, rank, size):
    if int(n) != n or n < 0:
        raise UsageError("cannot shard %r items: need a count >= 0" % (n,))
    if int(size) != size or size < 1:
        raise UsageError("shard count must be >= 1, got %r" % (size,))
    if int(rank) != rank or not 0 <= rank < size:
        raise UsageError("shard rank %r is outside 0..%d" % (rank, size - 1))


def shard_range(n, rank, size):
    """(start, stop) of shard `rank` out of `size` over n items.

    The first n % size shards hold one item more than the others, so sizes
    differ by at most one and the shards tile 0..n in rank order.
    """
    _check(n, rank, size)
    n, rank, size = int(n), int(rank), int(size)
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_indices(n, rank, size):
    """The item indices of shard `rank` as an int64 array."""
    start, stop = shard_range(n, rank, size)
    return np.arange(start, stop, dtype=np.int64)


def shard_items(items, rank, size):
    """The slice of a sequence (list of utterance ids, array...) owned by `rank`."""
    start, stop = shard_range(len(items), rank, size)
    return items[start:stop]


def shard_by_weight(items, weights, rank, size):
    """The contiguous slice of `items` owned by `rank` when shards hold
    near-equal total weight (utterances by their frames): item i belongs to
    the shard its weight's midpoint falls in, so no shard is short by more
    than about one item's weight. Zero total weight, or no more items than
    shards (one each at most, whatever the weights), falls back to counts."""
    _check(len(items), rank, size)
    w = np.asarray(weights, dtype=np.float64)
    total = float(w.sum())
    if len(items) <= size or total <= 0:
        return shard_items(items, rank, size)
    middle = np.cumsum(w) - w / 2
    owner = np.minimum((middle * size / total).astype(np.int64), size - 1)
    start, stop = np.searchsorted(owner, [rank, rank + 1], side="left")
    return items[int(start):int(stop)]

"""Seeded, resumable minibatches: Kaldi's frame randomizer (nnet-train-frmshuff).

The order of epoch e is a permutation drawn from (seed, e) alone, so a run
that stops after `position` batches and restarts with the same seed, epoch
and position sees exactly the batches it had not yet seen. On frame data the
permutation mixes frames across all utterances of the worker's shard; the
whole shard is shuffled at once rather than through a fixed-size buffer.
"""
import math

import numpy as np

from psgd.backend import array_module
from psgd.errors import UsageError


def epoch_permutation(n, seed, epoch):
    """The example order of one epoch (int64 host array)."""
    return np.random.default_rng([int(seed), int(epoch)]).permutation(n)


class Minibatches:
    """Iterator over (x_batch, y_batch) of one epoch.

    The last, partial batch is included. `position` counts the batches
    consumed so far (start > 0 resumes mid-epoch); len() is the number of
    batches of the whole epoch. shuffle=False keeps the stored order (for
    evaluation). Batches are gathered with the arrays' own module, so CuPy
    arrays stay on the device.
    """

    def __init__(self, x, y, batch_size, seed=0, epoch=0, start=0, shuffle=True):
        if len(x) != len(y):
            raise UsageError("minibatches: %d inputs but %d labels" % (len(x), len(y)))
        if int(batch_size) != batch_size or batch_size < 1:
            raise UsageError("batch size must be a positive integer, got %r" % (batch_size,))
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.seed, self.epoch = seed, epoch
        self.num_batches = math.ceil(len(y) / self.batch_size)
        if int(start) != start or not 0 <= start <= self.num_batches:
            raise UsageError("minibatch start %r is outside 0..%d" % (start, self.num_batches))
        self.position = int(start)
        order = epoch_permutation(len(y), seed, epoch) if shuffle else np.arange(len(y))
        # One transfer of the whole order instead of one per batch; labels
        # may live on the host while inputs are on the device.
        xm, ym = array_module(x), array_module(y)
        self._order_x = xm.asarray(order)
        self._order_y = self._order_x if ym is xm else ym.asarray(order)

    def __len__(self):
        return self.num_batches

    @property
    def remaining(self):
        return self.num_batches - self.position

    def __iter__(self):
        return self

    def __next__(self):
        if self.position >= self.num_batches:
            raise StopIteration
        lo = self.position * self.batch_size
        hi = lo + self.batch_size
        self.position += 1
        return self.x[self._order_x[lo:hi]], self.y[self._order_y[lo:hi]]

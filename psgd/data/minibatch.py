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
        self.position += 1
        return self.examples(lo, lo + self.batch_size)

    def examples(self, lo, hi):
        """(x, y) of the examples at lo..hi of this epoch's order."""
        return self.x[self._order_x[lo:hi]], self.y[self._order_y[lo:hi]]


class ShardStream:
    """A worker's shard as an endless run of passes: pass p's order is
    epoch p's permutation, cut into minibatches, and `take(k)` yields the
    next k examples wherever they fall, so an epoch may end inside a pass
    (its last minibatch cut short to fit) and the next one goes on from
    there. (pass_, position) is the cursor a checkpoint keeps, position in
    examples. Taken whole from (epoch, 0) every epoch, it is Minibatches."""

    def __init__(self, x, y, batch_size, seed):
        self.x, self.y, self.batch_size, self.seed = x, y, int(batch_size), seed
        self.size = len(y)
        self.pass_, self.position = 0, 0
        self._pass = None

    def seek(self, pass_, position=0):
        if not 0 <= int(position) <= self.size:
            raise UsageError("shard position %r is outside 0..%d" % (position, self.size))
        self.pass_, self.position, self._pass = int(pass_), int(position), None

    def take(self, count):
        """Minibatches of the next `count` examples (none from an empty shard)."""
        left = int(count)
        while left > 0 and self.size:
            if self.position == self.size:
                self.seek(self.pass_ + 1)
            if self._pass is None:
                self._pass = Minibatches(self.x, self.y, self.batch_size, self.seed,
                                         self.pass_)
            lo = self.position
            hi = min(lo + self.batch_size, self.size, lo + left)
            self.position, left = hi, left - (hi - lo)
            yield self._pass.examples(lo, hi)

"""The server's running average of its center (average_examples = H > 0):
Polyak-Ruppert averaging, exponentially weighted by the examples the
center's updates carried,

    a <- a + (1 - exp(-m / H)) (x - a)      m: examples folded in since the last fold

so a weighs the center of m examples ago by exp(-m / H) whatever the sync
sizes. The workers still pull x; a is what a job evaluates and writes
(Server.model_buffer): asynchronous deltas make x itself noisy at the full
rate, and the model read off it at an epoch's end can stand anywhere in
that noise (benchmarks/FINDINGS.md, "The server's center averaged").

Folding is a pass over the shard, so it runs once the updates since the
last fold carry H / FOLDS examples (the weights are the same, the steps
coarser) and whenever a is read."""
import math

from .. import kernels

FOLDS = 8      # folds per H examples: at most one pass over the shard per H/8 examples


class CenterAverage:
    def __init__(self, center, average, examples):
        self.center, self.average, self.examples = center, average, float(examples)
        self.pending = 0.0      # examples in x that a does not hold yet

    def restart(self):
        """a = x: a fresh object's average, with nothing pending."""
        self.average.data[...] = self.center.data
        self.pending = 0.0

    def updated(self, n_k):
        """x took an update of n_k examples."""
        self.pending += n_k
        if self.pending >= self.examples / FOLDS:
            self.fold()

    def fold(self):
        if self.pending > 0:
            kernels.lerp(self.average.data, self.center.data,
                         1.0 - math.exp(-self.pending / self.examples))
            self.pending = 0.0

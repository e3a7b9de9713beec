"""Learning-rate schedules: constant, exponential, anneal, and Kaldi's newbob.

anneal (the trainer's default): the rate holds for the first half of the
epochs (ANNEAL_FROM), then falls along a half cosine to ANNEAL_FLOOR times
itself by the last epoch. Adam at a constant rate spikes near convergence
(its second moment shrinks, so its normalized step stays at the rate while
the gradients it meets grow again); a rate that falls once the model is
close stops that. Held to the middle and to 0.3x, not a third and 0.1x: the
earlier and deeper fall slowed the server algorithms while their stale
deltas were still large (benchmarks/FINDINGS.md).

newbob (steps/nnet/train_scheduler.sh): keep the rate while the relative
held-out loss improvement is at least `start`; once it falls below, halve
every epoch; stop when the improvement while halving falls below `end`. An
epoch that makes the held-out loss worse is rejected (the model of the best
epoch is kept) and the rate is halved.
"""
import math

from ..errors import UsageError

KINDS = ("constant", "exponential", "anneal", "newbob")
DEFAULT = "anneal"          # the trainer's, for every algorithm and one worker
ANNEAL_FROM = 0.5
ANNEAL_FLOOR = 0.3


class Schedule:
    def __init__(self, kind, lr, decay=0.9, start=0.01, end=0.001, factor=0.5):
        if kind not in KINDS:
            raise UsageError("unknown lr schedule %r" % kind)
        if not 0 < factor < 1 or not 0 < decay <= 1:
            raise UsageError("lr factors must be in (0, 1)")
        self.kind, self.lr = kind, float(lr)
        self.decay, self.start, self.end, self.factor = decay, start, end, factor
        self.halving = False
        self.best_loss = None
        self.done = False

    def end_epoch(self, held_out_loss):
        """Advance one epoch. Returns True when the epoch is accepted (its
        model is the best so far); `lr` and `done` are updated."""
        if self.kind in ("constant", "anneal"):
            return True
        if self.kind == "exponential":
            self.lr *= self.decay
            return True
        if self.best_loss is None:
            self.best_loss = held_out_loss
            return True
        accepted = held_out_loss < self.best_loss
        gain = (self.best_loss - held_out_loss) / abs(self.best_loss) if self.best_loss else 0.0
        if accepted:
            self.best_loss = held_out_loss
        if self.halving and gain < self.end:
            self.done = True
        if gain < self.start:
            self.halving = True
        if self.halving:
            self.lr *= self.factor
        return accepted

    def fraction(self, epoch, epochs):
        """The fraction of `lr` that epoch `epoch` (0-based) of `epochs`
        trains at: 1 but under anneal. A function of the two alone, so a
        resumed run (or one given more --epochs) continues the same curve."""
        start = ANNEAL_FROM * epochs
        if self.kind != "anneal" or epoch < start:
            return 1.0
        done = min((epoch - start) / (epochs - start), 1.0)
        return ANNEAL_FLOOR + (1.0 - ANNEAL_FLOOR) * 0.5 * (1.0 + math.cos(math.pi * done))

    def describe(self, epochs):
        """What the start-up line adds to the rate: the anneal, else nothing."""
        lowered = [e for e in range(epochs) if self.fraction(e, epochs) < 1.0]
        if not lowered:             # too few epochs for the anneal to begin
            return ""
        return ", annealed to x%g over epochs %d-%d" % (ANNEAL_FLOOR, lowered[0] + 1, epochs)

    def state(self):
        return {"lr": self.lr, "halving": self.halving, "done": self.done,
                "best_loss": self.best_loss}

    def load(self, state, kind=None):
        """A checkpoint's state; `kind`, when given, the schedule it named."""
        self.kind = kind or self.kind
        self.lr, self.halving, self.done = state["lr"], state["halving"], state["done"]
        self.best_loss = state["best_loss"]


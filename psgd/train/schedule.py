"""Learning-rate schedules: constant, exponential, and Kaldi's newbob.

newbob (steps/nnet/train_scheduler.sh): keep the rate while the relative
held-out loss improvement is at least `start`; once it falls below, halve
every epoch; stop when the improvement while halving falls below `end`. An
epoch that makes the held-out loss worse is rejected (the model of the best
epoch is kept) and the rate is halved.
"""
from ..errors import UsageError


class Schedule:
    def __init__(self, kind, lr, decay=0.9, start=0.01, end=0.001, factor=0.5):
        if kind not in ("constant", "exponential", "newbob"):
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
        if self.kind == "constant":
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

    def state(self):
        return {"lr": self.lr, "halving": self.halving, "done": self.done,
                "best_loss": self.best_loss}

    def load(self, state):
        self.lr, self.halving, self.done = state["lr"], state["halving"], state["done"]
        self.best_loss = state["best_loss"]


"""Faults a long MPI job must survive or report: a rank that sends NaN/Inf,
and a rank that stops arriving at syncs (a stall: watchdog.py)."""
import warnings

from ..errors import NonFiniteError


class FiniteGuard:
    """Before a worker sends its model (or gradient), one read-only pass: the
    sum is NaN/Inf whenever an element is (an overflow of the sum itself is
    re-checked element-wise). By default a non-finite contribution stops the
    job naming the sync (the CLI adds the rank); with skip, it is replaced by
    the last good state with weight zero and counted.

    Its collaborators are explicit: the array namespace, the flat model and
    gradient arrays it guards, and the optimizer whose moments a dropped
    model's NaN gradient has reached. `keeps_model`: False on a server (it
    sends nothing of its own)."""

    def __init__(self, xp, params, grads, optimizer, skip, keeps_model=True):
        self.xp, self.params, self.grads = xp, params, grads
        self.optimizer, self.skip, self.keeps_model = optimizer, skip, keeps_model
        self.dropped = 0
        self.snapshot = None

    def check(self, buffer, n_k, where):
        """`n_k`, or 0 once `buffer` (params or grads) is replaced because it
        holds NaN/Inf; `where` names the sync ("before sync 3 (epoch 1)")."""
        xp = self.xp
        if bool(xp.isfinite(buffer.sum())) or bool(xp.isfinite(buffer).all()):
            return n_k
        gradient = buffer is self.grads
        where = "non-finite %s %s" % ("gradient" if gradient else "model", where)
        if not self.skip:
            raise NonFiniteError(where + "; stopping (--skip-nonfinite drops such "
                                 "contributions instead)")
        warnings.warn(where + ": contribution dropped")
        self.dropped += 1
        if gradient:
            # The optimizer has not seen it: its state stays what every
            # replica holds (syncgrad's replicas must stay identical).
            buffer.fill(0)
            return 0
        # A server algorithm adds what a worker sends even at weight zero:
        # send the model of the last good sync (asgd: a zero delta).
        buffer[...] = self.snapshot if self.snapshot is not None else 0
        self.optimizer.reset()  # its moments took in the NaN gradient
        return 0

    def saved(self):
        """At the start, after each good sync and after a rollback: the model
        to fall back on (kept only with skip)."""
        if self.skip and self.keeps_model:
            if self.snapshot is None:
                self.snapshot = self.params.copy()
            else:
                self.snapshot[...] = self.params


# The stall watchdog lives in watchdog.py; imported here for the trainers.
from .watchdog import Watchdog, stall_report  # noqa: E402,F401

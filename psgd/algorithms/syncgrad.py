"""syncgrad: synchronous gradient averaging every minibatch.

    g = sum_k (b_k / b) * g_k,   b = sum_k b_k
synchronize(b_k) replaces `grads` in place by g; every rank then applies the
same optimizer step to the same w, so the replicas stay identical.
"""
import numpy as np
from mpi4py import MPI

from .. import agreement, mpi
from ..buffers import host_copy
from ..errors import CollectiveUsageError
from .base import CollectiveWorker, register


@register
class SyncGrad(CollectiveWorker):
    name = "syncgrad"
    needs_grads = True
    OPTIONS = {}

    def initialized(self):
        self.grad_exchange = self.make_exchange(self.grad_buffer)
        self.restart()

    def restart(self):
        self.missed_steps = False

    def update(self, b_k, b, active):
        g = self.grad_buffer.data
        if b_k == 0:
            g.fill(0)  # a worker out of data adds nothing, whatever its grads hold
        else:
            g *= g.dtype.type(b_k / b)
        self.grad_exchange.allreduce()

    def stop(self, b_k=0, step=None, state=()):
        """Fold in the last batch (b_k), then keep averaging with b_k = 0.
        `step()` applies the optimizer to the averaged gradient after each
        round so this replica stays identical to the running ones. Without
        it this rank misses steps: at the end the lowest rank that applied
        every step hands its model, and the arrays in `state` (the
        optimizer's moments, the same shapes on every rank), to the rest."""
        self.repair_state = list(state)
        while self.synchronize(b_k):
            b_k = 0
            if step is not None:
                step()
            else:
                self.missed_steps = True

    def finish(self):
        """Collective, once per round: repair the replicas that missed steps."""
        size = self.node.size
        flags = np.array([size if self.missed_steps else self.node.rank,
                          -int(self.missed_steps)], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [flags, MPI.INT64_T], op=MPI.MIN)
        source, someone_missed = int(flags[0]), flags[1] < 0
        self.missed_steps = False       # the next round starts whole
        state, self.repair_state = getattr(self, "repair_state", []), []
        if not someone_missed:
            return
        if source == size:
            raise CollectiveUsageError(
                "syncgrad: every rank stopped without step= and missed optimizer steps, so "
                "no replica holds the common model; pass stop(b_k, step=fn)")
        self.exchange.bcast(source)
        if state:
            agreement.check_same(self.comm, [[list(a.shape), str(a.dtype)] for a in state],
                           "syncgrad repair state")
        for array in state:
            host = host_copy(array)
            mpi.Bcast(self.comm, host.reshape(-1), source)
            if isinstance(array, np.ndarray):
                array[...] = host
            else:
                array.set(host)     # a device array

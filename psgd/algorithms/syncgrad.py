"""syncgrad: synchronous gradient averaging every minibatch.

    g = sum_k (b_k / b) * g_k,   b = sum_k b_k
synchronize(b_k) replaces `grads` in place by g; every rank then applies the
same optimizer step to the same w, so the replicas stay identical.
"""
import numpy as np
from mpi4py import MPI

from .. import mpi
from .base import CollectiveWorker, register


@register
class SyncGrad(CollectiveWorker):
    name = "syncgrad"
    needs_grads = True
    OPTIONS = {}

    def initialized(self):
        self.grad_exchange = mpi.Exchange(self.comm, self.grad_buffer)
        self.missed_steps = False

    def update(self, b_k, b, active):
        g = self.grad_buffer.data
        if b_k == 0:
            g.fill(0)  # a worker out of data adds nothing, whatever its grads hold
        else:
            g *= g.dtype.type(b_k / b)
        self.grad_exchange.allreduce()

    def stop(self, b_k=0, step=None):
        """Fold in the last batch (b_k), then keep averaging with b_k = 0.
        `step()` applies the optimizer to the averaged gradient after each
        round so this replica stays identical to the running ones; without
        it the final model is copied from a rank that applied every step."""
        while self.synchronize(b_k):
            b_k = 0
            if step is not None:
                step()
            else:
                self.missed_steps = True

    def finish(self):
        # The lowest rank that applied every step hands its model to the rest.
        flag = np.array([self.node.size if self.missed_steps else self.node.rank], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [flag, MPI.INT64_T], op=MPI.MIN)
        source = int(flag[0])
        if source < self.node.size:
            self.exchange.bcast(source)

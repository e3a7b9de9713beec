"""A compressed sum of a device (CuPy) buffer, staged through pinned host
memory: the algorithm's error-feedback residual e_k and the sum's result
live on the device, where its fused kernels update them; the quantizers,
the owner's residual and the wire stay on the host (the striped or
two-level sum, unchanged). Per sync: e_k to the host, the host sum (which
leaves e_k - D(q_k) there), then e_k and G back. Every rank decodes the
same bytes as on the host path, so replicas stay identical.

The copies go through FlatBuffer's pinned mirrors and their stream
discipline (psgd/buffers.py): MPI reads a mirror only once its copy is
done, and the device reads a result only after its copy is queued before.
Two model-sized copies each way per sync: on a link slow enough to
compress for, small next to the bytes they save.
"""
from ..buffers import FlatBuffer


class DeviceFeedback:
    """ErrorFeedback's face for the algorithm: e_k on the device, the
    owner's residual r_j where the host sum keeps it."""

    def __init__(self, host_feedback, e):
        self._host, self._e = host_feedback, e

    @property
    def worker(self):
        return self._e.data

    @property
    def owner(self):
        return self._host.owner

    def zero(self):
        self._e.data.fill(0)
        self._host.zero()


class DeviceSum:
    """StripedSum's interface (feedback, sum) for a device buffer around
    `inner`, a host sum of the same size, whose e_k gives size and dtype."""

    def __init__(self, inner, xp):
        self.inner = inner
        size, dtype = inner.feedback.worker.size, inner.feedback.worker.dtype
        self._e = FlatBuffer(xp.zeros(size, dtype), [(size,)])
        self._result = FlatBuffer(xp.zeros(size, dtype), [(size,)])
        inner.feedback.worker = self._e.host     # the host sum works on e_k's mirror
        self.feedback = DeviceFeedback(inner.feedback, self._e)

    def sum(self, out, count=0, bad=0, wait=None):
        """out (device) <- G; the host sum's (count, bad, overflows)."""
        self._e.to_host()
        totals = self.inner.sum(self._result.host, count, bad, wait)
        self._e.from_host()
        self._result.from_host()
        out[...] = self._result.data
        return totals

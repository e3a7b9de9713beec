"""The compressed sum across hosts in two levels (docs/algorithms.md,
"Compression on the wire"): the striped sum's all-to-all and all-gather are
not host-aware, so with several ranks per host each of them sends its share
across the host's link. Two forms send only what one rank per host would:

- sliced, where every host has the same number of ranks L (Horovod's
  hierarchical allreduce has the same shape): the buffer is cut into L
  slices; inside each host the ranks reduce-scatter their contributions
  exactly, so local rank i holds its host's u of slice i; local rank i of
  every host runs the striped, error-fed sum of slice i with the others;
  an all-gather inside the host hands every rank all of G. Each rank
  encodes and decodes 1/L of the buffer, and a host's L exchanges share
  its link side by side.
- leader, for hosts of different sizes: each host sums its ranks'
  contributions exactly into its leader over shared memory, only the
  leaders run the striped sum, and the result and the header totals are
  broadcast inside each host.

Every rank decodes the same bytes either way. The residuals: e over the
whole buffer holds c_k until the sync; after it, what this rank sums for
its host (sliced: its slice; a leader: all of it) holds the host's e and
the rest is 0.

PSGD_COMPRESSION_HIERARCHY: auto (two levels when the ranks span more than
one host and some host has more than one rank), on (two levels, sliced
where the hosts are even), leader (two levels, the leader form), off.
"""
import numpy as np
from mpi4py import MPI

from .. import hierarchy, settings
from ..compression import ErrorFeedback, StripedSum, stripe_bounds
from ..compression.stripes import HEADER
from ..errors import UsageError
from ..mpi import mpi_type

CHOICES = ("auto", "on", "leader", "off")


def choice():
    """The setting's value; anything else is a UsageError naming it."""
    value = settings.get("PSGD_COMPRESSION_HIERARCHY").lower()
    if value not in CHOICES:
        raise UsageError("PSGD_COMPRESSION_HIERARCHY=%r: must be one of %s"
                         % (value, " | ".join(CHOICES)))
    return value


def _host_sizes(comm, levels):
    """(most, fewest) ranks on one host: the same on every rank (one
    Allreduce of two integers)."""
    local = levels.local.Get_size()
    most = np.array([local, -local], np.int64)
    comm.Allreduce(MPI.IN_PLACE, [most, MPI.INT64_T], op=MPI.MAX)
    return int(most[0]), int(-most[1])


def make(comm, size, dtype, q):
    """The two-level sum of `comm` under the setting, or None (the flat
    striped sum). Collective."""
    wanted = choice()
    if wanted == "off":
        return None
    levels = hierarchy.create(comm)
    most, fewest = _host_sizes(comm, levels)
    if wanted == "auto" and not (most > 1 and fewest < comm.Get_size()):
        levels.close()
        return None
    form = SlicedSum if most == fewest and wanted != "leader" else TwoLevelSum
    return form(levels, size, dtype, q)


class OverHosts:
    """What both forms share: the host split, which the parts of a split
    buffer (psgd.torch's buckets) share with the whole and it closes."""

    def __init__(self, levels):
        self.levels = levels

    def like(self, size, dtype, q):
        """The same form over another `size` elements, on the same split."""
        return type(self)(self.levels, size, dtype, q)

    def close(self):
        self.levels.close()


class SlicedSum(OverHosts):
    """StripedSum's interface (feedback, sum) over hosts of L ranks each:
    local rank i sums slice i across the hosts."""

    def __init__(self, levels, size, dtype, q):
        super().__init__(levels)
        local = levels.local
        bounds = stripe_bounds(size, local.Get_size())
        self.counts = [hi - lo for lo, hi in bounds]
        self.displs = [lo for lo, _ in bounds]
        lo, hi = self.mine = bounds[local.Get_rank()]
        e = np.zeros(size, dtype)
        self.striped = StripedSum(levels.cross, hi - lo, dtype, q, residual=e[lo:hi])
        self.feedback = ErrorFeedback(size, 0, dtype, worker=e, owner=self.striped.feedback.owner)
        self.host_u = np.zeros(hi - lo, dtype)
        self.totals = np.zeros(2, np.int64)
        self.type = mpi_type(dtype)

    def sum(self, out, count=0, bad=0, wait=None):
        """out <- G on every rank; (sum of count, sum of bad, overflows).
        `wait`: the striped sum's, across the hosts."""
        local, e, (lo, hi) = self.levels.local, self.feedback.worker, self.mine
        totals = self.totals
        totals[:] = (count, bad)
        local.Allreduce(MPI.IN_PLACE, [totals, MPI.INT64_T], op=MPI.SUM)
        local.Reduce_scatter([e, self.type], [self.host_u, self.type], self.counts, op=MPI.SUM)
        e[:lo] = 0                      # sent: the slice's owner carries it
        e[hi:] = 0
        e[lo:hi] = self.host_u
        # a device sum stages e through a mirror of its own: take the slice now
        self.striped.feedback.worker = e[lo:hi]
        count, bad, overflow = self.striped.sum(out[lo:hi], int(totals[0]), int(totals[1]),
                                                wait)
        local.Allgatherv(MPI.IN_PLACE, [out, (self.counts, self.displs), self.type])
        flags = np.array([overflow], np.int64)
        local.Allreduce(MPI.IN_PLACE, [flags, MPI.INT64_T], op=MPI.SUM)
        return count, bad, int(flags[0])


class TwoLevelSum(OverHosts):
    """StripedSum's interface (feedback, sum) through one leader per host."""

    def __init__(self, levels, size, dtype, q):
        super().__init__(levels)
        if levels.is_leader:
            self.striped = StripedSum(levels.leaders, size, dtype, q)
            self.feedback = self.striped.feedback
        else:
            # c_k's buffer, and no owner stripe: kept as state all the same,
            # so every rank's checkpoint has the same keys
            self.striped, self.feedback = None, ErrorFeedback(size, 0, dtype)
        self.totals = np.zeros(HEADER, np.int64)

    def _leaders_sum(self, out, wait):
        def inter_sum(leaders, u, totals):
            totals[:] = self.striped.sum(out, int(totals[0]), int(totals[1]), wait)
        return inter_sum

    def sum(self, out, count=0, bad=0, wait=None):
        """out <- G on every rank; (sum of count, sum of bad, overflows).
        `wait`: the striped sum's, between the leaders."""
        totals = self.totals
        totals[:] = (count, bad, 0)
        self.levels.sum(self.feedback.worker, self._leaders_sum(out, wait), totals, result=out)
        if not self.levels.is_leader:
            self.feedback.worker.fill(0)    # sent: its host's leader carries the residual
        return int(totals[0]), int(totals[1]), int(totals[2])

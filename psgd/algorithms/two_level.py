"""The compressed sum across hosts in two levels (docs/algorithms.md,
"Compression on the wire"): the striped sum's all-to-all and all-gather are
not host-aware, so with several ranks per host each of them sends its share
across the host's link. Two forms send only what one rank per host would:

- sliced, where every host has the same number of ranks L (Horovod's
  hierarchical allreduce has the same shape): the buffer is cut into L
  slices; inside each host the ranks reduce-scatter their contributions
  exactly, so local rank i holds its host's u of slice i; local rank i of
  every host runs the striped, error-fed sum of slice i with the others;
  an all-gather inside the host hands every rank the quantized p_j of
  every slice, which it decodes: the bytes the link carried, not G in
  float32. Each rank's count and flags ride in its slice's headers, so
  every rank sums them from the slices it decodes. Each rank encodes 1/L
  of the buffer, and a host's L exchanges share its link side by side.
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
from ..compression.stripes import HEADER, decode_gathered, wire_layout
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
        i = local.Get_rank()
        self.bounds = bounds = stripe_bounds(size, local.Get_size())
        lo, hi = self.mine = bounds[i]
        self.type, self.q = mpi_type(dtype), q
        # every slice's gathered wire, slice by slice (all hosts alike: the
        # cross communicators have one rank per host); this rank's striped
        # sum gathers into its own slice's
        hosts = levels.cross.Get_size()
        self.layouts = [wire_layout(b - a, hosts, q) for a, b in bounds]
        self.wire_counts = [sum(sizes) for _, sizes, _ in self.layouts]
        self.wire_displs = np.cumsum([0] + self.wire_counts[:-1]).tolist()
        self.wires = np.zeros(sum(self.wire_counts), np.uint8)
        at = self.wire_displs[i]
        e = np.zeros(size, dtype)
        self.striped = StripedSum(levels.cross, hi - lo, dtype, q, residual=e[lo:hi],
                                  gathered=self.wires[at:at + self.wire_counts[i]])
        self.feedback = ErrorFeedback(size, 0, dtype, worker=e, owner=self.striped.feedback.owner)
        # the ring's partial sums in flight, two so a send never reads what
        # a receive is writing
        most = max(b - a for a, b in bounds)
        self.partials = (np.zeros(most, dtype), np.zeros(most, dtype))

    def sum(self, out, count=0, bad=0, wait=None):
        """out <- G on every rank; (sum of count, sum of bad, overflows).
        `wait`: the striped sum's, across the hosts."""
        local, e, (lo, hi) = self.levels.local, self.feedback.worker, self.mine
        self._reduce_scatter(local, e)
        e[:lo] = 0                      # sent: the slice's owner carries it
        e[hi:] = 0
        # a device sum stages e through a mirror of its own: take the slice now
        self.striped.feedback.worker = e[lo:hi]
        # this rank's count and flags ride in its slice's headers
        totals = np.array(self.striped.sum(out[lo:hi], count, bad, wait))
        local.Allgatherv(MPI.IN_PLACE, [self.wires, (self.wire_counts, self.wire_displs),
                                        MPI.BYTE])
        i = local.Get_rank()
        for j, ((a, b), layout, at) in enumerate(zip(self.bounds, self.layouts,
                                                      self.wire_displs)):
            if j != i:      # and local rank j's in slice j's
                totals += decode_gathered(self.q, self.wires[at:at + self.wire_counts[j]],
                                          layout, out[a:b])
        return tuple(int(x) for x in totals)

    def _reduce_scatter(self, local, e):
        """e[slice i] <- the host's sum of slice i on local rank i, exactly:
        a ring of L - 1 exchanges of a slice each, every slice summed from
        the next local rank on round to its owner, which adds its own last:
        what a bandwidth-optimal reduce-scatter sends, and a summation order
        of psgd's own (MPI's Reduce_scatter was 4x slower under Open MPI:
        benchmarks/FINDINGS.md)."""
        L, i = local.Get_size(), local.Get_rank()
        bounds, t = self.bounds, self.type
        sent = e
        for step in range(L - 1):
            (a, b), (c, d) = bounds[(i - step - 1) % L], bounds[(i - step - 2) % L]
            into = self.partials[step % 2][:d - c]
            local.Sendrecv([sent[a:b] if step == 0 else sent, t], (i + 1) % L, 0,
                           [into, t], (i - 1) % L, 0)
            if step == L - 2:           # slice i, its owner's own part last
                np.add(into, e[c:d], out=e[c:d])
            else:
                into += e[c:d]
            sent = into


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

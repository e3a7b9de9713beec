"""The compressed sum across hosts in two levels (docs/algorithms.md,
"Compression on the wire"): the striped sum's all-to-all and all-gather are
not host-aware, so with several ranks per host each of them sends its share
across the host's link. Here each host first sums its ranks' contributions
exactly over shared memory; only the host leaders run the striped, error-fed
sum, so the residuals live on the leaders (a non-leader's buffer holds its
c_k until the sync and is 0 after it); the leaders' result and the header
totals are broadcast inside each host, so every rank decodes the same bytes.

PSGD_COMPRESSION_HIERARCHY: auto (two levels when the ranks span more than
one host and some host has more than one rank), on, off.
"""
import numpy as np
from mpi4py import MPI

from .. import hierarchy, settings
from ..compression import ErrorFeedback, StripedSum
from ..compression.stripes import HEADER
from ..errors import UsageError

CHOICES = ("auto", "on", "off")


def choice():
    """The setting's value; anything else is a UsageError naming it."""
    value = settings.get("PSGD_COMPRESSION_HIERARCHY").lower()
    if value not in CHOICES:
        raise UsageError("PSGD_COMPRESSION_HIERARCHY=%r: must be one of %s"
                         % (value, " | ".join(CHOICES)))
    return value


def _worth_it(comm, levels):
    """More than one host, and some host with more than one rank: the same
    answer on every rank (one Allreduce of two integers)."""
    local = levels.local.Get_size()
    most = np.array([local, -local], np.int64)
    comm.Allreduce(MPI.IN_PLACE, [most, MPI.INT64_T], op=MPI.MAX)
    return most[0] > 1 and -most[1] < comm.Get_size()


def make(comm, size, dtype, q):
    """The TwoLevelSum of `comm` under the setting, or None (the flat
    striped sum). Collective."""
    wanted = choice()
    if wanted == "off":
        return None
    levels = hierarchy.create(comm)
    if wanted == "auto" and not _worth_it(comm, levels):
        levels.close()
        return None
    return TwoLevelSum(levels, size, dtype, q)


class TwoLevelSum:
    """StripedSum's interface (feedback, sum) over a host split."""

    def __init__(self, levels, size, dtype, q):
        self.levels = levels
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

    def close(self):
        self.levels.close()

"""The two-level sum: one rank per host sends the host's sum across the link.

A flat collective over P ranks on H hosts moves each rank's share across
the host links; an exchange that is not host-aware (the striped sum's
all-to-all and all-gather) then sends a host's data once per rank instead
of once per host. Here the ranks of a host sum into their leader over
shared memory, the leaders alone run the inter-host sum (any callable:
an Allreduce, the striped compressed sum), and each leader hands the
result back to its host's ranks. The split also gives, across hosts, the
ranks of each local rank (`cross`), on which the compressed sum's sliced
form exchanges a slice per local rank (psgd/algorithms/two_level.py).
"""
from mpi4py import MPI

from .mpi import mpi_type


class Hierarchy:
    """`comm` split into hosts (`local`), and across them by local rank
    (`cross`: local rank i of every host, rank ascending); `leaders` is the
    cross communicator of local rank 0 (COMM_NULL on every other rank)."""

    def __init__(self, comm, host=None):
        rank = comm.Get_rank()
        if host is None:
            self.local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        else:
            # the tests fake several hosts on one machine
            self.local = comm.Split(int(host), key=rank)
        self.is_leader = self.local.Get_rank() == 0
        self.cross = comm.Split(self.local.Get_rank(), key=rank)

    @property
    def leaders(self):
        return self.cross if self.is_leader else MPI.COMM_NULL

    @property
    def hosts(self):
        """Number of hosts (leaders); known on leaders only, else None."""
        return self.leaders.Get_size() if self.is_leader else None

    def sum(self, array, inter_sum, totals=None, result=None):
        """array <- the sum of `array` over every rank of comm, in place:
        summed into the host's leader, `inter_sum(leaders, array)` on the
        leaders (it must leave the same sum on every leader), then
        broadcast inside each host. `totals`: a small int64 array (a batch
        count, error flags) summed inside the host beside the data, handed
        on as `inter_sum(leaders, array, totals)` and broadcast back with
        the result, so what the leaders learn reaches every rank.
        `result`: where inter_sum leaves the sum, if not in `array` (the
        compressed sum keeps its residual in `array`); it is what the
        leaders broadcast. Collective over comm."""
        parts = [array] if totals is None else [array, totals]
        if self.local.Get_size() > 1:
            for part in parts:
                buf = [part, mpi_type(part.dtype)]
                if self.is_leader:
                    self.local.Reduce(MPI.IN_PLACE, buf, op=MPI.SUM, root=0)
                else:
                    self.local.Reduce(buf, None, op=MPI.SUM, root=0)
        if self.is_leader:
            inter_sum(self.leaders, *parts)
        if result is not None:
            parts[0] = result
        if self.local.Get_size() > 1:
            for part in parts:
                self.local.Bcast([part, mpi_type(part.dtype)], root=0)
        return array if result is None else result

    def close(self):
        """Frees the communicators (collective)."""
        for c in (self.local, self.cross):
            if c != MPI.COMM_NULL:
                c.Free()
        self.local = self.cross = MPI.COMM_NULL


def create(comm, host=None):
    """The two-level split of `comm`: hosts by shared memory, or by the
    integer `host` each rank passes (ranks passing the same one share a
    host). Collective."""
    return Hierarchy(comm, host)


def allreduce(leaders, array):
    """The plain inter-host sum: an in-place Allreduce among the leaders."""
    leaders.Allreduce(MPI.IN_PLACE, [array, mpi_type(array.dtype)], op=MPI.SUM)
    return array


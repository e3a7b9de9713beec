"""A server's control messages (TAG_MSG), queued in the order it serves them.

One Irecv is posted per worker for its next control message; poll() tests
them all at once and appends what arrived to a FIFO, arrivals seen in the
same poll in round-robin order starting after the worker last served. A
worker has at most one control message outstanding and its receive is
posted again only once it is served, so once queued it waits for at most
one sync of every other worker: a worker in a tight loop cannot starve the
others (MPI's ANY_SOURCE matching makes no such promise).

The server's event loop, its failure path (server_failure.py) and the
followers of a service order (service_order.py) all read this one queue.
A queue that survives workers (`lossy`, under ULFM: psgd/ulfm.py) collects
the ranks whose receive failed because their process died in `lost`.
"""
import collections

import numpy as np
from mpi4py import MPI

from .. import ulfm
from ..protocol import (CONTROL_SLOTS, MESSAGES, NOTICE_MALFORMED, NOTICE_UNKNOWN,
                        TAG_MSG)


class ControlQueue:
    """Entries are (rank, message, n_k, arrived): `arrived` is the server's
    sync count when the message was seen."""

    def __init__(self, comm, servers, size, waiter, lossy=False):
        self.comm, self.first, self.size, self.lossy = comm, servers, size, lossy
        self.lost = set()                   # workers found dead, not yet taken by the server
        self.waiter = waiter                # how an idle wait polls and sleeps
        self.last_served = 0                # the rank the round robin starts after
        self._control = np.zeros((size, CONTROL_SLOTS), dtype=np.int64)
        self._requests = [MPI.REQUEST_NULL] * (size - servers)
        self._statuses = [MPI.Status() for _ in self._requests]
        self._entries = collections.deque()

    def __len__(self):
        return len(self._entries)

    def ranks(self):
        """The workers with a message in the queue."""
        return {entry[0] for entry in self._entries}

    def popleft(self):
        return self._entries.popleft()

    def take(self, rank):
        """Remove and return `rank`'s queued entry, or None if it has none."""
        for i, entry in enumerate(self._entries):
            if entry[0] == rank:
                del self._entries[i]
                return entry
        return None

    def post(self, rank):
        """Receive `rank`'s next control message."""
        self._requests[rank - self.first] = self.comm.Irecv(
            [self._control[rank], MPI.INT64_T], source=rank, tag=TAG_MSG)

    def posted(self, rank):
        return self._requests[rank - self.first] != MPI.REQUEST_NULL

    def listening(self):
        """Whether any receive is still posted (anything more can arrive)."""
        return any(r != MPI.REQUEST_NULL for r in self._requests)

    def poll(self, block, stats, arrived, also=None):
        """Queue the well-formed control messages that arrived, stamped
        `arrived`; with `block`, wait (the Waiter's policy, its time counted
        in `stats`) until at least one has or `also()` is true. Returns the
        bad ones as (notice code, rank, value, text), in the order seen."""
        if block:
            def test():
                got = self._arrivals()
                return got if got is not None or also is None or not also() else ([],)
            (done,) = self.waiter.wait(test, stats)
        else:
            done = self._testsome()
        bad = []
        first, size = self.first, self.size
        for j, status in sorted(done, key=lambda d: (d[0] + first - self.last_served - 1) % size):
            rank = j + first
            count = status.Get_count(MPI.INT64_T)
            message, n_k = int(self._control[rank, 0]), int(self._control[rank, 1])
            if count != 2:
                bad.append((NOTICE_MALFORMED, rank, count * 8,
                            "malformed control message from rank %d (%d bytes, expected 16)"
                            % (rank, count * 8)))
            elif message not in MESSAGES:
                bad.append((NOTICE_UNKNOWN, rank, message,
                            "unknown control message %d from rank %d (expected %s)" % (
                                message, rank, _one_of(
                                    "%d = %s" % kv for kv in sorted(MESSAGES.items())))))
            elif n_k < 0:
                bad.append((NOTICE_MALFORMED, rank, n_k,
                            "negative sample count %d from rank %d" % (n_k, rank)))
            else:
                self._entries.append((rank, message, n_k, arrived))
        return bad

    def _testsome(self):
        """[(index, status)] of the receives completed; in a lossy queue
        those whose sender died go to `lost` instead."""
        if not self.lossy:
            done = MPI.Request.Testsome(self._requests, self._statuses)
            return [(j, self._statuses[k]) for k, j in enumerate(done or ())]
        done, failed = ulfm.testsome(self._requests, self._statuses)
        self.lost.update(j + self.first for j, _ in failed)
        return done

    def _arrivals(self):
        """The Waiter's test: None while nothing has arrived (or died)."""
        done = self._testsome()
        return None if not done and not self.lost else (done,)


def _one_of(names):
    """'a, b or c'."""
    names = list(names)
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)

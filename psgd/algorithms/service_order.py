"""One service order for every shard: with servers = S > 1 and asgd/masgd's
barrier_period, rank 0 leads. After each control message it dispatches (a
SYNC or a FINISHED) it sends int64 [rank] to servers 1..S-1 on TAG_ORDER, and
they dispatch that worker's next message in the same order. The barrier rule
depends only on the service order, so every shard then holds and releases
the same replies: left to their own orders, two shards could each hold a
worker the other had already answered, and wait for each other for ever.
A leader that gives up sends [LEADER_FAILED]; a follower then gives up too.
Orders a follower did not read (it gave up first) are received after the
servers' agreement, which tells it how many were sent."""
import time

import numpy as np
from mpi4py import MPI

from ..protocol import LEADER_FAILED, TAG_ORDER


class ServiceOrder:
    def __init__(self, comm, rank, servers):
        self.comm, self.leads = comm, rank == 0
        self.followers = range(1, servers) if self.leads else ()
        self.sent = self.received = 0
        self._order = np.zeros(1, dtype=np.int64)
        self._request = MPI.REQUEST_NULL
        self._head = None

    # rank 0 ------------------------------------------------------------------------
    def tell(self, rank):
        """The leader dispatches `rank`'s message (or gives up: LEADER_FAILED)."""
        self._order[0] = rank
        for follower in self.followers:
            self.comm.Send([self._order, MPI.INT64_T], dest=follower, tag=TAG_ORDER)
        self.sent += 1

    # ranks 1..S-1 ------------------------------------------------------------------------
    def head(self):
        """The rank whose message comes next, or None while the leader has
        not said (it has not dispatched it yet)."""
        if self._head is None:
            if self._request == MPI.REQUEST_NULL:
                self._request = self.comm.Irecv([self._order, MPI.INT64_T], source=0,
                                                tag=TAG_ORDER)
            if self._request.Test():
                self.received += 1
                self._head = int(self._order[0])
        return self._head

    def next_entry(self, server, stats):
        """A follower's next entry of the server's ControlQueue (rank,
        message, n_k, arrived): the one rank 0 dispatched next, waited for
        by the queue's Waiter. The server gives up on a bad message, or when
        rank 0 has."""
        control = server.control
        def ready():        # None until the order and that worker's message are both in
            rank = self.head()
            if rank == LEADER_FAILED:
                server.give_up_after_leader()
            server.poll_control(block=False)
            entry = control.take(rank)
            if entry is not None:
                self._head = None
            return entry
        start = time.perf_counter()
        entry = control.waiter.wait(ready, stats)
        stats.idle_s += time.perf_counter() - start
        return entry

    def drain(self, sent):
        """After the servers' agreement: receive what the leader sent and
        this follower did not read, so no message is left behind."""
        left = sent - self.received
        if self._request != MPI.REQUEST_NULL:
            if left > 0:
                self._request.Wait()
                left -= 1
            else:
                self._request.Cancel()
                self._request.Wait()
        for _ in range(left):
            self.comm.Recv([self._order, MPI.INT64_T], source=0, tag=TAG_ORDER)
        self.received = sent

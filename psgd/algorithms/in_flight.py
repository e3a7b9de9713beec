"""Syncs served in the background: the server goes on serving the others
while one worker's exchange crawls over a slow link (issue 31).

Served in line, an exchange holds the server for as long as the worker's
model takes to cross its link: over a 20 Mbit/s link easgd's 0.2 MB model
took ~90 ms each way while every other worker waited (benchmarks/FINDINGS.md,
"Uneven workers"). So a worker whose exchanges take SLOW_FACTOR times the
others' and at least SLOW_MIN_S (each worker's time the median of its last
RECENT exchanges: one stall of a shared core does not count) is served in
the background. The server posts the receive of the worker's message into
a buffer of the transfer's own and goes back to its queue; its event loop
tests the transfers in flight along with its control messages.
- easgd replies with x as it is when the exchange begins: a copy, sent at
  once; the update runs with x as it is when w_k has arrived.
- asgd and masgd reply with x after the update: when delta_k has arrived
  the server applies it and sends a copy of x as it is then.
The sync is logged when its update is applied (`reply` the update count
of the x the worker got, `order` the count before this update) and the
server listens to that worker again once its reply has gone, so a worker
has at most one transfer in flight. A transfer's time is measured too, so
a worker whose link recovers is served in line again.

Memory: two models per transfer in flight (kept for the worker's next one
while it stays slow); none while every link is as fast as the others.
"""
import collections
import time

from .. import mpi, pieces

SLOW_FACTOR = 4.0       # an exchange this many times the others' median ...
SLOW_MIN_S = 10e-3      # ... and at least this long (scheduling noise on shared cores)
RECENT = 3              # exchanges a worker's time is the median of


class Transfer:
    """One sync served in the background: `reply` (x's update count when it
    was copied), and the sync's control entry once the server has it.
    Both ways at once (easgd), or the worker's message first and the reply
    once the update is in (asgd: reply_with(), which arrived() calls)."""

    def __init__(self, rank, reply, pair, both=True):
        self.rank, self.reply, self.pair = rank, reply, pair
        self.began = time.perf_counter()
        self.n_k = self.arrived = None
        self.replying = both            # the reply is on its way
        sent, received = pair
        self.requests = [received.irecv(rank)] + ([sent.isend(rank)] if both else [])

    def reply_with(self, center, reply):
        """Send a copy of `center` (x after `reply` updates) back."""
        self.pair[0].buffer.data[...] = center.buffer.data
        self.reply, self.replying = reply, True
        self.requests.append(self.pair[0].isend(self.rank))

    @property
    def incoming(self):
        """The worker's model, once test() has said the transfer is done."""
        return self.pair[1].buffer

    def test(self):
        return all(request.test() for request in self.requests)

    def wait(self):
        for request in self.requests:
            request.wait()


class InFlight:
    """A server's transfers in flight, and each worker's last exchange time."""

    def __init__(self, comm, piece):
        self.comm, self.piece = comm, piece     # the algorithm's (pieces.py)
        self.transfers = {}         # rank -> Transfer
        self.started = 0            # syncs served in the background so far
        self.took = {}              # rank -> seconds its last RECENT exchanges took
        self._spare = {}            # rank -> the pair of its last transfer

    def __len__(self):
        return len(self.transfers)

    def timed(self, rank, seconds):
        """An exchange with `rank` took `seconds`."""
        self.took.setdefault(rank, collections.deque(maxlen=RECENT)).append(seconds)

    def _typical(self, rank):
        recent = sorted(self.took.get(rank, ()))
        return recent[len(recent) // 2] if len(recent) == RECENT else None

    def slow(self, rank):
        """Whether `rank`'s next sync should be served in the background."""
        mine = self._typical(rank)
        others = sorted(t for t in (self._typical(r) for r in self.took if r != rank)
                        if t is not None)
        if mine is None or not others or mine < SLOW_MIN_S:
            return False
        return mine > SLOW_FACTOR * others[len(others) // 2]

    def start(self, rank, center, reply=None):
        """Receive `rank`'s message in the background and, given the update
        count `reply`, send it a copy of `center` (an Exchange on x) at
        once; else the reply waits for Transfer.reply_with. Returns the
        Transfer."""
        pair = self._spare.pop(rank, None) or tuple(
            pieces.server_part(mpi.Exchange(self.comm, center.buffer.like()), 0,
                               center.buffer.size, self.piece) for _ in range(2))
        if reply is not None:
            pair[0].buffer.data[...] = center.buffer.data
        transfer = self.transfers[rank] = Transfer(rank, reply, pair, both=reply is not None)
        self.started += 1
        return transfer

    def resume(self, transfer):
        """Back in flight, its reply on the way (after the update)."""
        self.transfers[transfer.rank] = transfer

    def any_done(self):
        """Whether a transfer is done (the idle wait's test; MPI progresses them)."""
        return any(t.test() for t in self.transfers.values())

    def done(self):
        """The transfers that are done, out of flight, in the order they began."""
        out = [t for t in sorted(self.transfers.values(), key=lambda t: t.began) if t.test()]
        for t in out:
            del self.transfers[t.rank]
            if t.replying:                      # both ways done: the whole exchange
                self.timed(t.rank, time.perf_counter() - t.began)
        return out

    def release(self, transfer):
        """After its update: keep its buffers for the worker's next transfer
        while that worker is still slow."""
        if self.slow(transfer.rank):
            self._spare[transfer.rank] = transfer.pair

    def wait_all(self):
        """Complete every transfer without its update (a server giving up
        before it tells its workers: they still take part in them)."""
        for transfer in self.transfers.values():
            transfer.wait()
        self.transfers.clear()

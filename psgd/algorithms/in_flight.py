"""Syncs served in the background: the server goes on serving the others
while one worker's exchange crawls over a slow link (issue 31; easgd).

Served in line, an exchange holds the server for as long as the worker's
model takes to cross its link: over a 20 Mbit/s link easgd's 0.2 MB model
took ~90 ms each way while every other worker waited (benchmarks/FINDINGS.md,
"Uneven workers"). So a worker whose last exchange took SLOW_FACTOR times
the others' typical one, and at least SLOW_MIN_S, is served in the
background: the server copies x as it is into a reply buffer of the
transfer's own, posts that send and the receive of the worker's model into
a second buffer, and goes back to its queue. Its event loop tests the
transfers in flight along with its control messages; once both sides are
done the algorithm applies the update with x as it is then, the sync is
logged (`reply` the update count x had when it was copied, `order` the
count when it is applied) and the server listens to that worker again, so
a worker has at most one transfer in flight. A transfer's time is measured
too, so a worker whose link recovers is served in line again.

Memory: two models per transfer in flight (kept for the worker's next one
while it stays slow); none while every link is as fast as the others.
"""
import time

from .. import mpi, pieces

SLOW_FACTOR = 4.0       # an exchange this many times the others' median ...
SLOW_MIN_S = 5e-3       # ... and at least this long (scheduling noise on shared cores)


class Transfer:
    """One sync served in the background: `reply` (x's update count when it
    was copied), and the sync's control entry once the server has it."""

    def __init__(self, rank, reply, pair):
        self.rank, self.reply, self.pair = rank, reply, pair
        self.began = time.perf_counter()
        self.n_k = self.arrived = None
        sent, received = pair
        self.requests = [received.irecv(rank), sent.isend(rank)]

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

    def __init__(self, comm, in_pieces):
        self.comm, self.in_pieces = comm, in_pieces
        self.transfers = {}         # rank -> Transfer
        self.took = {}              # rank -> seconds its last exchange took
        self._spare = {}            # rank -> the pair of its last transfer

    def __len__(self):
        return len(self.transfers)

    def timed(self, rank, seconds):
        """An exchange with `rank` served in line took `seconds`."""
        self.took[rank] = seconds

    def slow(self, rank):
        """Whether `rank`'s next sync should be served in the background."""
        mine = self.took.get(rank)
        others = sorted(s for r, s in self.took.items() if r != rank)
        if mine is None or not others or mine < SLOW_MIN_S:
            return False
        return mine > SLOW_FACTOR * others[len(others) // 2]

    def start(self, rank, center, reply):
        """Send `rank` a copy of `center` (an Exchange on x) and receive its
        model, in the background. Returns the Transfer."""
        pair = self._spare.pop(rank, None) or tuple(
            pieces.server_part(mpi.Exchange(self.comm, center.buffer.like()), 0,
                               center.buffer.size, self.in_pieces) for _ in range(2))
        pair[0].buffer.data[...] = center.buffer.data
        transfer = self.transfers[rank] = Transfer(rank, reply, pair)
        return transfer

    def any_done(self):
        """Whether a transfer is done (the idle wait's test; MPI progresses them)."""
        return any(t.test() for t in self.transfers.values())

    def done(self):
        """The transfers that are done, out of flight, in the order they began."""
        out = [t for t in sorted(self.transfers.values(), key=lambda t: t.began) if t.test()]
        for t in out:
            del self.transfers[t.rank]
            self.took[t.rank] = time.perf_counter() - t.began
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

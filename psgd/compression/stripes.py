"""The striped sum: G = sum_k Q(u_k), formed stripe by stripe.

Stripe j of n elements is [floor(j*n/P), floor((j+1)*n/P)), owned by rank j.
One Alltoallv hands rank j stripe j of every q_k; rank j sums them (k
ascending, in the buffer's dtype), quantizes the sum with its own residual
r_j, and one Allgatherv hands every p_j to every rank, which decodes them:
all ranks decode the same bytes, so replicas stay identical.

Each message is a header of three int64 [count, bad counts, overflow] and
the quantized stripe, padded to 8 bytes. The header carries what must be
summed exactly beside the data (syncgrad's batch count, Fixes 8) and the
flags that make an error every rank's: the owner adds the headers it got to
its own and sends the sums on, so every rank learns the same totals from
the all-gather, without another collective.
"""
import numpy as np
from mpi4py import MPI

from .feedback import ErrorFeedback

HEADER = 3          # int64: [count, bad counts, overflows]
HEADER_BYTES = 8 * HEADER
PIECE = 1 << 17     # elements: psgd/jit.py's MIN_SIZE, so a piece's passes are compiled


def stripe_bounds(n, P):
    """[(lo, hi)] of the P stripes of n elements."""
    return [(j * n // P, (j + 1) * n // P) for j in range(P)]


def _pad8(n):
    return n + (-n) % 8


def wire_layout(size, P, quantizer):
    """(bounds, sizes, offsets): the stripes of `size` elements among P and
    their messages' bytes and places in a wire that holds all of them."""
    bounds = stripe_bounds(size, P)
    sizes = [_pad8(HEADER_BYTES + quantizer.nbytes(b - a)) for a, b in bounds]
    return bounds, sizes, np.cumsum([0] + sizes[:-1]).tolist()


def pieces(quantizer, n):
    """[(lo, hi)] of n elements in pieces of about PIECE, each starting
    where the quantizer allows a range to: an algorithm's pass over a piece
    and the quantizer's over it meet it while it is in cache."""
    step = -(-PIECE // quantizer.align) * quantizer.align
    return [(a, min(a + step, n)) for a in range(0, n, step)]


def decode_gathered(quantizer, wire, layout, out, after=None):
    """out <- concat_j D(p_j) from a wire holding every p_j, piece by piece,
    after(lo, hi) on each piece of out as it is decoded (not where a header
    says a value overflowed: the caller raises, the algorithm's state as it
    was); the headers' (sum of count, sum of bad, overflows)."""
    result = np.zeros(HEADER, np.int64)
    for size, offset in zip(*layout[1:]):
        result += wire[offset:offset + HEADER_BYTES].view(np.int64)
    if result[2]:
        after = None
    for (lo, hi), size, offset in zip(*layout):
        payload, stripe = wire[offset + HEADER_BYTES:offset + size], out[lo:hi]
        for a, b in pieces(quantizer, hi - lo):
            quantizer.decode(payload, stripe, lo=a, hi=b)
            if after is not None:
                after(lo + a, lo + b)
    # every owner's header holds the sum over all senders: count once
    P = len(layout[0])
    return int(result[0]) // P, int(result[1]) // P, int(result[2])


class StripedSum:
    """The striped, error-fed sum of one flat buffer of `size` elements over
    `comm`, with wire buffers allocated once. `residual`: an array of `size`
    elements to keep e_k in (a view of a larger one), else its own;
    `gathered`: a uint8 array of the gathered wire's bytes to gather into,
    else its own."""

    def __init__(self, comm, size, dtype, quantizer, residual=None, gathered=None):
        self.comm, self.q = comm, quantizer
        P, rank = comm.Get_size(), comm.Get_rank()
        self.rank, self.P = rank, P
        self.bounds = stripe_bounds(size, P)
        lo, hi = self.bounds[rank]
        self.mine = (lo, hi)
        self.feedback = ErrorFeedback(size, hi - lo, dtype, worker=residual)
        self.layout = wire_layout(size, P, quantizer)
        _, self.sizes, self.offsets = self.layout
        total = sum(self.sizes)
        self.send = np.zeros(total, np.uint8)       # q_k, stripe by stripe
        self.recv = np.zeros(P * self.sizes[rank], np.uint8)   # stripe j of every q_k
        self.gathered = np.zeros(total, np.uint8) if gathered is None else gathered   # every p_j
        self.stripe_sum = np.zeros(hi - lo, dtype)  # S_j

    def _header(self, wire, offset):
        return wire[offset:offset + HEADER_BYTES].view(np.int64)

    def _payload(self, wire, offset, size):
        return wire[offset + HEADER_BYTES:offset + size]

    def sum(self, out, count=0, bad=0, wait=None, before=None, after=None):
        """out <- G = concat_j D(p_j), where u_k = feedback.worker (the
        caller added c_k to it, or before(lo, hi) adds it to each piece just
        before it is encoded: e_k <- u_k - D(q_k) here; after(lo, hi) runs
        on each piece of out as it is decoded). `count`, `bad`: summed
        exactly in the headers. `wait(request)`: completes each of the two
        collectives (default: MPI's Wait; psgd's transfer thread passes a
        poll that sleeps between tests, so it leaves the cores to backward).
        Returns (sum of count, sum of bad, overflows)."""
        wait = wait or MPI.Request.Wait
        e, ok = self.feedback.worker, True
        for (lo, hi), offset, size in zip(self.bounds, self.offsets, self.sizes):
            payload, stripe = self._payload(self.send, offset, size), e[lo:hi]
            for a, b in pieces(self.q, hi - lo):
                if before is not None:
                    before(lo + a, lo + b)
                ok = self.q.encode(stripe, payload, a, b) and ok
            self._header(self.send, offset)[:] = (count, bad, not ok)
        mine = self.sizes[self.rank]
        wait(self.comm.Ialltoallv([self.send, (self.sizes, self.offsets), MPI.BYTE],
                                  [self.recv, ([mine] * self.P,
                                               [k * mine for k in range(self.P)]), MPI.BYTE]))
        totals = np.zeros(HEADER, np.int64)
        S = self.stripe_sum
        for k in range(self.P):
            totals += self._header(self.recv, k * mine)
            self.q.decode(self._payload(self.recv, k * mine, mine), S, add=k > 0)
        r = self.feedback.owner
        r += S                                       # v_j = S_j + r_j
        own = self.offsets[self.rank]
        totals[2] += not self.q.encode(r, self._payload(self.gathered, own, mine))
        self._header(self.gathered, own)[:] = totals
        wait(self.comm.Iallgatherv(MPI.IN_PLACE, [self.gathered, (self.sizes, self.offsets),
                                                  MPI.BYTE]))
        return decode_gathered(self.q, self.gathered, self.layout, out, after)

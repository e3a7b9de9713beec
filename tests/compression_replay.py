"""A serial replay of the contract's striped, error-fed sum (docs/algorithms.md,
"Compression on the wire") for P ranks in one process, with psgd's
quantizers (tests/unit/compression checks those against the formulas)."""
import numpy as np

from psgd.compression import quantizer


def roundtrip(q, u):
    """D(Q(u)); u <- u - D(Q(u)) (error feedback)."""
    wire = np.zeros(q.nbytes(u.size), np.uint8)
    q.encode(u, wire)
    out = np.empty_like(u)
    q.decode(wire, out)
    return out


class Replay:
    """Every rank's e_k and every owner's r_j, and the sums they give."""

    def __init__(self, kind, P, n, dtype=np.float32, block=512):
        self.q, self.P, self.n = quantizer(kind, block), P, n
        self.bounds = [(j * n // P, (j + 1) * n // P) for j in range(P)]
        self.e = [np.zeros(n, dtype) for _ in range(P)]
        self.r = [np.zeros(hi - lo, dtype) for lo, hi in self.bounds]

    def sum(self):
        """G, given that the caller added every c_k to e[k]:
        u_k = c_k + e_k; q_k = Q(u_k); S_j = sum_k D(q_k[j]) (k ascending);
        v_j = S_j + r_j; p_j = Q(v_j); G = concat_j D(p_j)."""
        G = np.empty_like(self.e[0])
        for j, (lo, hi) in enumerate(self.bounds):
            S = None
            for k in range(self.P):
                d = roundtrip(self.q, self.e[k][lo:hi])
                S = d if S is None else S + d
            self.r[j] += S
            G[lo:hi] = roundtrip(self.q, self.r[j])
        return G


class HostReplay:
    """The contract over host sums (psgd/algorithms/two_level.py), rank by
    rank: every rank's e_k as psgd keeps it (the caller adds c_k to e[k]),
    summed exactly inside each host, then the striped sum of the host sums
    among the hosts, in one of two forms. leader: the host's first rank
    sums the whole buffer (rank ascending) and keeps its residual. sliced
    (hosts of L ranks each): the buffer in L slices, slice i summed round
    the host's ring from local rank i + 1 to its owner, local rank i, which
    keeps its residual."""

    def __init__(self, kind, groups, n, block, sliced):
        self.groups = groups
        self.e = [np.zeros(n, np.float32) for _ in range(sum(map(len, groups)))]
        L = len(groups[0])
        self.sliced = sliced
        self.bounds = [(i * n // L, (i + 1) * n // L) for i in range(L)] if sliced else [(0, n)]
        self.slices = [Replay(kind, len(groups), hi - lo, np.float32, block)
                       for lo, hi in self.bounds]

    def sum(self):
        G = np.empty_like(self.e[0])
        for i, ((lo, hi), r) in enumerate(zip(self.bounds, self.slices)):
            for h, ranks in enumerate(self.groups):
                ring = ranks[i + 1:] + ranks[:i + 1] if self.sliced else ranks
                u = self.e[ring[0]][lo:hi].copy()
                for k in ring[1:]:
                    u += self.e[k][lo:hi]
                for k in ranks:
                    self.e[k][lo:hi] = 0
                r.e[h] = u
            G[lo:hi] = r.sum()
            for h, ranks in enumerate(self.groups):
                self.e[ranks[i]][lo:hi] = r.e[h]     # the holder's residual
        return G

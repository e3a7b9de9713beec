"""The timeline's recorder: spans (name, start, end, args) of what this
process did, kept in memory on this process's clock and handed to whoever
writes them (psgd/train/timeline.py) with the offset to rank 0's clock.

Off (`recorder` None) it costs one check per hook. On, it records the spans
the straggler attribution reads (SYNC, SERVE, ARRIVE): one per sync;
with `detail` (--timeline) also the parts of each sync and the compute
between syncs."""
import time

import numpy as np
from mpi4py import MPI

recorder = None     # this process's Recorder while a run records

# What the attribution reads. SYNC: a collective sync is a rendezvous keyed
# by its number, a server algorithm's is a worker waiting for its server(s);
# SERVE: a server serving one worker; ARRIVE: an epoch-end rendezvous.
SYNC, SERVE, ARRIVE = "sync", "serve", "epoch end"
# What only the timeline shows.
COMPUTE, COUNT, EXCHANGE, WITH_SERVER, IDLE = (
    "compute", "count", "exchange + update", "exchange with server", "idle")
SERVER_END, EVALUATE, CHECKPOINT = "epoch end (server)", "evaluate", "checkpoint"
WAITING = "waiting"         # added by rank 0 from the attribution: args {"for": rank}
# Every kind of span and the names of its args (numbers: a span travels to
# rank 0 as one row of float64, [kind, start, end, args...]).
KINDS = {SYNC: ("sync", "collective"), SERVE: ("worker", "sync", "staleness"),
         ARRIVE: ("epoch",), SERVER_END: ("epoch",), CHECKPOINT: ("epoch",),
         COMPUTE: (), COUNT: (), EXCHANGE: (), WITH_SERVER: (), IDLE: (), EVALUATE: ()}
_NAMES = list(KINDS)
_ROW = 3 + max(len(a) for a in KINDS.values())

now = time.time


class Recorder:
    def __init__(self, detail=False):
        self.detail = detail
        self.spans = []
        self.computing_since = None

    def add(self, name, start, end, args=None):
        self.spans.append((name, start, end, args))

    def part(self, name, start, end, args=None):
        """A span only the timeline shows (not read by the attribution)."""
        if self.detail:
            self.spans.append((name, start, end, args))

    def sync(self, start, end, number, collective):
        """One sync, and the compute since the last one (the first sync of a
        run or an epoch computes from `resume()`)."""
        if self.detail and self.computing_since is not None:
            self.spans.append((COMPUTE, self.computing_since, start, None))
        self.spans.append((SYNC, start, end, {"sync": number, "collective": collective}))
        self.computing_since = end

    def resume(self, at=None):
        """Computing from `at` (now) on: after an epoch's end, say."""
        self.computing_since = now() if at is None else at

    def pause(self):
        """Not computing (the epoch's end): the span since the last sync closes."""
        if self.detail and self.computing_since is not None:
            self.spans.append((COMPUTE, self.computing_since, now(), None))
        self.computing_since = None

    def take(self):
        """The spans recorded since the last take()."""
        spans, self.spans = self.spans, []
        return spans


def _row(span):
    name, start, end, args = span
    row = [_NAMES.index(name), start, end] + [0.0] * (_ROW - 3)
    for i, key in enumerate(KINDS[name]):
        row[3 + i] = args[key]
    return row


def _span(row):
    name = _NAMES[int(row[0])]
    keys = KINDS[name]
    args = {k: (bool(v) if k == "collective" else int(v)) for k, v in zip(keys, row[3:])}
    return name, float(row[1]), float(row[2]), args or None


def gather(comm, spans, offset):
    """Collective: every rank's `spans` on rank 0's clock (this rank's clock
    minus `offset`), as a list per rank on rank 0; None on the others."""
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = np.array([_row(s) for s in spans], dtype=np.float64).reshape(-1, _ROW)
    mine[:, 1:3] -= offset
    counts = np.zeros(size, dtype=np.int64)
    comm.Gather([np.array([mine.size], dtype=np.int64), MPI.INT64_T],
                [counts, MPI.INT64_T], root=0)
    whole = np.zeros(int(counts.sum()) if rank == 0 else 0, dtype=np.float64)
    comm.Gatherv([mine, MPI.DOUBLE], [whole, (counts, None), MPI.DOUBLE] if rank == 0
                 else None, root=0)
    if rank != 0:
        return None
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [[_span(row) for row in whole[bounds[r]:bounds[r + 1]].reshape(-1, _ROW)]
            for r in range(size)]


def install(rec):
    """Make `rec` (None: off) the recorder every hook reports to."""
    global recorder
    recorder = rec


def clock_offsets(comm, rounds=8):
    """Collective: this rank's clock minus rank 0's, in seconds (0.0 on rank 0).
    Rank 0 asks each rank for its time `rounds` times; the answer of the
    shortest round trip is taken as read at the round trip's midpoint."""
    comm = comm.Dup()            # its own tag space
    rank, size = comm.Get_rank(), comm.Get_size()
    ping, pong = np.zeros(1), np.zeros(1)
    offsets = np.zeros(size)
    if rank == 0:
        for r in range(1, size):
            best = None
            for _ in range(rounds):
                sent = now()
                comm.Send([ping, MPI.DOUBLE], dest=r, tag=0)
                comm.Recv([pong, MPI.DOUBLE], source=r, tag=0)
                back = now()
                if best is None or back - sent < best[0]:
                    best = (back - sent, pong[0] - (sent + back) / 2)
            offsets[r] = best[1]
    else:
        for _ in range(rounds):
            comm.Recv([ping, MPI.DOUBLE], source=0, tag=0)
            pong[0] = now()
            comm.Send([pong, MPI.DOUBLE], dest=0, tag=0)
    comm.Bcast([offsets, MPI.DOUBLE], root=0)
    comm.Free()
    return float(offsets[rank])

"""A worker's exchange left in flight (easgd's `overlap`): the worker goes
on computing while its model crosses a slow link.

Served in the background (in_flight.py), a worker behind a slow link no
longer holds the server, but it still waits for its own exchange: over a
20 Mbit/s link easgd's 0.2 MB model took 65-80 ms (median) against 82 ms
of compute per block, so that worker took two thirds of the others'
share of an epoch (benchmarks/FINDINGS.md, "easgd with a slow host").
Left in flight, the worker sends a snapshot of its model and applies the
elastic pull at its next sync (or stop):

    sync t:      s <- w_k;  send s, receive x_r            (in flight)
    sync t + 1:  wait;  w_k <- w_k - alpha * (s - x_r);  then sync t + 1

The pull is the one an in-line exchange applies, one block late; the
server's side and the messages are unchanged. psgd's transfer thread
(mpi_async.py) polls the transfer while the worker computes, since across
a network a transfer moves only while both ends poll (waiting.py); the
device staging stays on the caller's thread (mpi.Exchange's rules).

When, under `auto`: once the shorter of the worker's exchange and its
compute between syncs (each the median of its last RECENT) is at least
SHARE of the longer, the exchange at least in_flight.SLOW_MIN_S, and the
job spans hosts. Left in flight, an exchange hides at most the compute
beside it, and it costs a copy of the model, a transfer thread that
shares the interpreter and a pull one block late: with little compute
beside it, it hid next to nothing and cost much (easgd with no compute
between syncs, S = 2 across hosts: 0.59-0.68 of the links against 0.81-
0.83 in line; benchmarks/FINDINGS.md, "overlap auto with nothing to hide
behind"). On one host an exchange is a copy by the cores that compute,
with nothing to hide it behind, and a shared core's stall would switch it
on by chance. `always` (the tests'
way to run it on one host) and `never` decide alone. The worker measures
its exchanges in flight too, so it goes back in line when its link
recovers. Memory: one more model, allocated at the first exchange left
in flight."""
import collections
import time

import numpy as np

from .. import mpi, mpi_async
from .in_flight import RECENT, SLOW_MIN_S

MODES = ("auto", "always", "never")
SHARE = 0.25        # the shorter of exchange and compute over the longer: the
                    # overlap hides at least a fifth of a sync's cycle


class Flight:
    """One worker's exchanges: their times, and the one left in flight."""

    def __init__(self, mode, across_hosts):
        self.mode, self.across_hosts = mode, across_hosts
        self.took = collections.deque(maxlen=RECENT)       # seconds of its last exchanges
        self.computed = collections.deque(maxlen=RECENT)   # seconds between its last syncs
        self.left = 0               # exchanges left in flight so far
        self.snapshot = None        # (buffer, its shards' Exchanges), once needed
        self._handle = self._receives = None
        self._began = self._returned = None

    def wanted(self):
        """Whether this sync's exchange is left in flight."""
        if self.mode != "auto":
            return self.mode == "always"
        if not self.across_hosts or len(self.took) < RECENT or len(self.computed) < RECENT:
            return False
        took, computed = float(np.median(self.took)), float(np.median(self.computed))
        return took >= SLOW_MIN_S and min(took, computed) >= SHARE * max(took, computed)

    def begin(self):
        """A sync's exchange begins."""
        self._began = time.perf_counter()

    def exchanged(self):
        """The exchange begun is done, in line."""
        self.took.append(time.perf_counter() - self._began)

    def returned(self):
        """The sync returns to the worker's compute."""
        self._returned = time.perf_counter()

    def snapshot_of(self, worker):
        """The snapshot buffer, now holding the worker's model, and its
        shards' Exchanges."""
        if self.snapshot is None:
            buffer = worker.buffer.like()
            self.snapshot = (buffer, worker.shard_parts(mpi.Exchange(worker.comm, buffer)))
        buffer, parts = self.snapshot
        buffer.data[...] = worker.buffer.data
        return buffer, parts

    def leave(self, receives, sends, await_server):
        """Requests posted by the caller ((server, mpi.Request) pairs): wait
        on the transfer thread, without the stage-in of the receives."""
        began = self._began
        self._receives = receives

        def job():
            await_server(receives, sends, stage_in=False)
            self.took.append(time.perf_counter() - began)
        self.left += 1
        self._handle = mpi_async.start(job)

    @property
    def in_flight(self):
        return self._handle is not None

    def land(self, before_sync=True):
        """Wait for the exchange left in flight and stage its receives in;
        raises what the wait raised (a server's failure). True if one was
        in flight. Called as every sync begins (before_sync: the time since
        the last one returned was compute between syncs) and at stop."""
        if self._returned is not None and before_sync:
            self.computed.append(time.perf_counter() - self._returned)
        self._returned = None
        handle, self._handle = self._handle, None
        if handle is None:
            return False
        receives, self._receives = self._receives, None
        handle.wait()
        for _, request in receives:
            request.wait()
        return True

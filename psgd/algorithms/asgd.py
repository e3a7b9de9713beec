"""asgd: asynchronous delta push / model pull (Downpour style; Kaldi's AsgdServer).

Worker k, at each synchronize:
    Send(MSG_SYNC); Send(w_k - w_prev); Recv(x)
    w_k <- x; w_prev <- x
Server, on MSG_SYNC from k:
    Recv(delta_k); x <- x + alpha * delta_k; Send(x)
Default alpha = 1.0.

barrier_period = K > 0 (the reference's --sync-period): after K syncs since the
last release the server holds its replies (it still applies every delta) until
every still-running worker is waiting, then answers them all with the same x
and starts counting again. So when the barrier closes no worker's model lags
the center by more than K updates, and a delta is applied at most
K + N - 2 updates after the x it started from. K <= 0 disables it.

staleness_compensation = none | scale | dc corrects a delta for the updates
the center took since the worker's x_start (staleness.py has the math).

A worker whose exchanges crawl (a slow link) is served in the background
(in_flight.py): its delta is received while the server serves the others,
and its update and reply follow when it is in.
"""
import functools
import time

import numpy as np
from mpi4py import MPI

from .. import kernels, mpi, pieces
from ..buffers import host_copy
from ..errors import UsageError
from ..protocol import TAG_MODEL
from . import compressed, staleness
from .base import register
from .option import Option, positive
from .server import Server
from .server_options import SERVER_OPTIONS
from .server_worker import ServerWorker, work_pieces

OPTIONS = {"alpha": Option(1.0, positive, help="the center's gain on a delta (default 1)"),
           "barrier_period": Option(0, kind=int,
                                    help="bounded staleness K: a barrier every K syncs "
                                         "(default 0: none)"),
           **staleness.OPTIONS,
           **SERVER_OPTIONS,
           **compressed.OPTIONS}


class AsgdServer(Server):
    name = "asgd"
    OPTIONS = OPTIONS

    def initialized(self):
        self.held = []                 # workers whose reply waits for the barrier
        self.since_release = 0
        self.delay_compensation = staleness.DelayCompensation(
            self.center, range(self.servers, self.node.size), self.dc_lambda) \
            if self.staleness_compensation == "dc" else None
        self.decoder = compressed.make_decoder(self.incoming.size, self.options)
        self.mean_squares = np.zeros(self.node.size)   # dc: each worker's delta's, sent first
        super().initialized()

    def serve(self, rank):
        if self.in_background(rank):                 # in_flight.py: reply on arrival
            mean_sq = self.receive_mean_square(rank)   # posted before the delta's receives
            transfer = self.in_flight.start(rank, self.center_exchange)
            transfer.requests += [mean_sq] if mean_sq is not None else []
            return transfer
        began = time.perf_counter()
        reply = self._serve_in_line(rank)
        self.in_flight.timed(rank, time.perf_counter() - began)
        return reply

    def receive_mean_square(self, rank):
        """dc with the push not compressed: the request that receives the
        mean square of `rank`'s delta, which it sends first (else None)."""
        if self.delay_compensation is None or (self.decoder is not None and
                                               self.decoder.compressed(rank)):
            return None
        return mpi.Request([self.comm.Irecv(self.mean_squares[rank:rank + 1], source=rank,
                                            tag=TAG_MODEL)])

    def in_background(self, rank):
        # and nothing holds or orders its reply (no barrier), and its push is
        # a plain delta (not compressed)
        return (self.barrier_period <= 0 and self.decoder is None and
                super().in_background(rank))

    def arrived(self, transfer):
        """x <- x + alpha * delta_k, then the reply: x as it is now."""
        self.settle()
        rank = transfer.rank
        self.incoming.data[...] = transfer.incoming.data
        if self.delay_compensation is not None:
            self.delay_compensation.correct(rank, self.center.data, self.incoming.data,
                                            self.mean_squares[rank])
        self.update(rank, 0, self.incoming.size)
        transfer.reply_with(self.center_exchange, self.syncs + 1)
        self.replied(rank)

    def _serve_in_line(self, rank):
        self.since_release += 1
        hold = bool(self.held) or 0 < self.barrier_period <= self.since_release
        dc, received = self.delay_compensation, False
        request, mean_sq = self.receive_mean_square(rank), None
        if request is not None:
            request.wait()
            mean_sq = self.mean_squares[rank]
        if self.decoder is not None and self.decoder.compressed(rank):
            # one message of Q(u); delta_k = D(q)
            self.comm.Recv([self.decoder.wire, MPI.BYTE], source=rank, tag=TAG_MODEL)
            self.decoder.q.decode(self.decoder.wire, self.incoming.host)   # a device's: its mirror
            self.incoming.from_host()
            received = True
        if dc is not None and received:                     # a decoded push, whole
            dc.correct(rank, self.center.data, self.incoming.data)

        def step(lo, hi):
            if mean_sq is not None:
                dc.correct(rank, self.center.data, self.incoming.data, mean_sq, lo, hi)
            self.update(rank, lo, hi)
        # Recv(delta_k); x <- x + alpha * delta_k; Send(x): piece by piece.
        # A worker in turns (when READY) leaves its reply to drain while the
        # server takes up the next one, whose push then starts at once; for
        # a plain SYNC, already arriving, that measured slower (FINDINGS)
        self.replying = pieces.serve(self.incoming_exchange, self.center_exchange, rank,
                                     step, reply=not hold, received=received,
                                     replying=self.settled())
        if not self.when_ready:
            self.settle()
        if hold:
            self.held.append(rank)
            return None
        self.replied(rank)
        return self.syncs + 1

    def one_order(self):
        # the barrier rule reads the service order: every shard must share it
        return self.barrier_period > 0

    def replied(self, rank):
        if self.delay_compensation is not None:
            self.delay_compensation.replied(rank, self.center.data)

    def restart(self):
        super().restart()
        if self.delay_compensation is not None:             # every x_start is x
            self.delay_compensation.reset(self.center.data)

    def set_alpha(self, alpha):
        """The center's gain on every delta from the next round on (the
        trainer's mean delta by the workers' summed pace, shares.py)."""
        problem = positive(alpha)
        if problem:
            raise UsageError("asgd: alpha %s" % problem)
        self.alpha = float(alpha)

    def gain(self):
        """The factor of the delta being served (staleness_compensation = scale)."""
        return staleness.staleness_gain(self.staleness_compensation, self.staleness)

    def update(self, rank, lo, hi):
        """x += alpha * delta_k on elements [lo, hi)."""
        kernels.axpy(self.center.data[lo:hi], self.alpha * self.gain(), self.incoming.data[lo:hi])

    def after_sync(self, rank):
        self._release_if_all_wait()

    def worker_finished(self, rank):
        self._release_if_all_wait()

    def worker_lost(self, rank):
        if rank in self.held:               # its held reply has nobody to go to
            self.held.remove(rank)
        self._release_if_all_wait()

    def _release_if_all_wait(self):
        if self.held and set(self.held) == self.running:
            self.reply_held(self.held)
            self.held, self.since_release = [], 0


@register
class Asgd(ServerWorker):
    name = "asgd"
    OPTIONS = OPTIONS
    server = AsgdServer
    WORKER_STATE = ("w_prev",)

    def initialized(self):
        self.previous = self.buffer.like()      # w_prev: the x last pulled
        self.previous_parts = self.shard_parts(mpi.Exchange(self.comm, self.previous))
        self.pull_parts = self.previous_parts
        self.delta = self.buffer.like()
        self.delta_parts = self.shard_parts(mpi.Exchange(self.comm, self.delta))
        self.mean_squares = np.zeros(self.servers)      # dc: each shard's, sent first
        self.push = compressed.make_push(self.shards, self.buffer.dtype, self.options)
        super().initialized()

    def restart(self):
        self.previous.data[...] = self.buffer.data
        if self.push is not None:
            self.push.residual.fill(0)

    def before_push(self):
        self.formed = [False] * self.servers
        self.wires = None
        if self.push is not None and self.push.applies(self.syncs):
            self._form(range(self.servers), mean_squares=False)
            self.wires = self.push.encode(self.delta.data, self.syncs, self.node.rank)
        elif self.staleness_compensation == "dc":   # a mean square goes before its shard
            self._form(self.turns()[0])
        # else each turn's shards are formed piece by piece as they go (_push)

    def _subtract(self, lo, hi):
        """delta <- w_k - w_prev on elements [lo, hi)."""
        self.buffer.xp.subtract(self.buffer.data[lo:hi], self.previous.data[lo:hi],
                                out=self.delta.data[lo:hi])

    def pulled(self, lo, hi):
        """w_k <- x (pulled into w_prev) on elements [lo, hi)."""
        self.buffer.data[lo:hi] = self.previous.data[lo:hi]

    def _other_shards_work(self, replies):
        """The other turns' deltas formed and the shards whose reply is in
        (of `replies`, earlier turns') copied into w_k, in work pieces
        (callables for await_server; dc's deltas whole, each with its mean
        square)."""
        if self.staleness_compensation == "dc":
            work = [functools.partial(self._form, range(self.servers))]
        else:
            work = [functools.partial(self._subtract, a, b)
                    for s in range(self.servers) if not self.formed[s]
                    for a, b in work_pieces(*self.shards[s])]
            self.formed = [True] * self.servers
        return work + self.pulled_work(replies)

    def _form(self, shards, mean_squares=True):
        """delta <- w_k - w_prev on `shards` not formed yet (dc: and each
        one's mean square, which its server reads before the first piece of
        a push not compressed)."""
        for s in shards:
            if not self.formed[s]:
                lo, hi = self.shards[s]
                self._subtract(lo, hi)
                if mean_squares and self.staleness_compensation == "dc":
                    self.mean_squares[s] = kernels.mean_square(self.delta.data[lo:hi])
                self.formed[s] = True

    def exchange_with_server(self, servers, replies):
        receives = [(s, self.previous_parts[s].irecv(s)) for s in servers]  # w_prev <- x
        if self.wires is not None:
            sends = [(s, mpi.Request([self.comm.Isend([self.wires[s], MPI.BYTE], dest=s,
                                                      tag=TAG_MODEL)]))
                     for s in servers]
        else:   # dc: the shard's mean square first, so the server corrects piece by piece
            sends = [(s, self._send_mean_square(s)) for s in servers
                     if self.staleness_compensation == "dc"]
            sends += [(s, self._push(s)) for s in servers]
        # with servers in turns (S > 1), the work of the other turns' shards
        # runs while this turn's bytes cross the link
        return receives, sends, self._other_shards_work(replies)

    def _push(self, s):
        """Isend shard s's delta. One not formed yet is formed a piece at a
        time, each piece sent as soon as it is: the link starts at once
        instead of after a pass over the shard (FINDINGS, "asgd's worker
        with sharded servers: the first turn's delta formed as it goes")."""
        part = self.delta_parts[s]
        if self.formed[s]:
            return part.isend(s)
        base = self.shards[s][0]
        requests = []
        for lo, hi in part.pieces():
            self._subtract(base + lo, base + hi)
            requests += part.isend_part(s, lo, hi).requests
        self.formed[s] = True
        return mpi.Request(requests)

    def _send_mean_square(self, s):
        return mpi.Request([self.comm.Isend([self.mean_squares[s:s + 1], MPI.DOUBLE], dest=s,
                                            tag=TAG_MODEL)])

    def state_dict(self):
        state = {"w_prev": host_copy(self.previous.data)}
        if self.push is not None:
            state["residual_worker"] = self.push.residual.copy()
        return state

    def _load_state(self, state):
        self.previous.data[...] = self.buffer.xp.asarray(state["w_prev"])
        if self.push is not None:
            saved = state.get("residual_worker")
            ok = saved is not None and np.shape(saved) == self.push.residual.shape
            self.push.residual[...] = saved if ok else 0

"""easgd: asynchronous elastic averaging (Zhang, Choromanska & LeCun 2015;
Kaldi's EasgdServer/EasgdWorker).

Worker k, at each synchronize:
    Send(MSG_SYNC -> 0, TAG_MSG)
    Sendrecv(send w_k, receive x, TAG_MODEL)     # x as it was before this update
    w_k <- w_k - alpha * (w_k - x)
Server, on MSG_SYNC from k:
    Sendrecv(send x, receive w_k, TAG_MODEL)
    x <- x + alpha * (w_k - x)
Both sides use the values from before the exchange (a symmetric elastic force).
A worker whose exchanges crawl (a slow link) is served in the background
(in_flight.py): it gets x as it was when its exchange began, and the server's
update uses x as it is when w_k has arrived.
staleness_compensation = scale: the server's rate on a model staler than a
round of the workers (tau > N; a worker behind a slow link) is
alpha * N / tau, so an old model drags the center less.
A worker whose exchanges and compute between syncs are within a factor
of 4 of each other, across hosts, leaves its exchanges in flight and
applies its pull one block late (overlap.py):
    w_k <- w_k - alpha * (s - x)       s: the w_k it sent
Default alpha = 0.9 / N (the paper's beta = N * alpha = 0.9).
"""
import time

from .. import kernels, mpi
from ..protocol import MSG_SYNC
from . import overlap
from .base import register
from .option import Option
from .staleness import COMPENSATIONS, elastic_gain
from .server import Server
from .server_options import SERVER_OPTIONS
from .server_worker import ServerWorker


def _elastic_range(alpha):
    return None if 0.0 < alpha <= 1.0 else "must satisfy 0 < alpha <= 1"


def _no_dc(chosen):
    return "corrects a delta; easgd trades models (none or scale)" if chosen == "dc" else None


OPTIONS = {"alpha": Option(lambda N: 0.9 / max(N, 1), _elastic_range,
                    help="moving rate (default 0.9/N; the trainer's: max(0.9/N, 0.3))"),
           "staleness_compensation": Option(
               "none", _no_dc, kind=COMPENSATIONS,
               help="scale: the server's alpha on a model staler than a round of the N "
                    "workers is alpha * N / tau (default none; the trainer's: scale)"),
           "overlap": Option("auto", kind=overlap.MODES,
                             help="a worker computes on while its exchange crosses a slow "
                                  "link, pulling one block late: auto (across hosts, once its "
                                  "exchanges and its compute are within a factor of 4), "
                                  "always, never"),
           **SERVER_OPTIONS}


class EasgdServer(Server):
    name = "easgd"
    OPTIONS = OPTIONS
    in_pieces = False           # its update follows the reply: pieces.py says why

    def serve(self, rank):
        reply = self.syncs                      # the worker gets x before this update
        if self.in_background(rank):
            return self.in_flight.start(rank, self.center_exchange, reply)  # in_flight.py
        began = time.perf_counter()
        self.center_exchange.sendrecv(rank, self.incoming_exchange)
        self.in_flight.timed(rank, time.perf_counter() - began)
        kernels.lerp(self.center.data, self.incoming.data, self.rate())  # x += alpha (w_k - x)
        return reply

    def arrived(self, transfer):
        kernels.lerp(self.center.data, transfer.incoming.data, self.rate())  # x as it is now

    def rate(self):
        """alpha for the sync served now, of staleness tau (scale: N / tau past N)."""
        return self.alpha * elastic_gain(self.staleness_compensation, self.staleness, self.N)


@register
class Easgd(ServerWorker):
    name = "easgd"
    not_compressed = ("easgd exchanges a model, not a delta, so it is not compressed "
                      "(compression serves bsp, bmuf, sod, syncgrad and the push of asgd "
                      "and masgd)")
    OPTIONS = OPTIONS
    server = EasgdServer
    flight = None

    def initialized(self):
        super().initialized()
        self.center = self.buffer.like()        # x, as received (every shard)
        self.model_parts = self.shard_parts(self.exchange)
        self.center_parts = self.pull_parts = self.shard_parts(mpi.Exchange(self.comm,
                                                                           self.center))
        self.flight = overlap.Flight(self.overlap, self.exchange.spans_hosts())

    def send_and_receive(self, n_k):
        flight = self.flight
        flight.begin()
        if flight.wanted():         # every shard at once: no turn waits for another
            snapshot, parts = flight.snapshot_of(self)
            everyone = range(self.servers)
            self._send_control(MSG_SYNC, n_k, everyone)
            sends = [(s, parts[s].isend(s)) for s in everyone]
            receives = [(s, self.center_parts[s].irecv(s)) for s in everyone]
            flight.leave(receives, sends, self.await_server)
        else:
            super().send_and_receive(n_k)
            flight.exchanged()
        flight.returned()

    def land(self, before_sync=True):
        if self.flight is not None and self.flight.land(before_sync):   # w_k -= alpha (s - x)
            kernels.axpy(self.buffer.data, self.alpha, self.center.data)
            kernels.axpy(self.buffer.data, -self.alpha, self.flight.snapshot[0].data)

    def exchange_with_server(self, servers, replies):
        # one message each way per shard
        sends = [(s, self.model_parts[s].isend(s)) for s in servers]
        receives = [(s, self.center_parts[s].irecv(s)) for s in servers]
        return receives, sends, self.pulled_work(replies)

    def pulled(self, lo, hi):                               # w_k -= alpha (w_k - x)
        kernels.lerp(self.buffer.data[lo:hi], self.center.data[lo:hi], self.alpha)

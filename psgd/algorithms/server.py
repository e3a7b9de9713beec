"""What easgd, asgd and masgd share on rank 0: the event loop (Kaldi's
EasgdServer/AsgdServer run loop, with the fixes of docs/algorithms.md); the worker
side of the wire protocol is server_worker.py, every message of it is in
docs/protocol.md. The algorithm files hold only their exchange and update.

Wire protocol. A worker opens every exchange with a control message on
TAG_MSG, int64 [message, n_k] (the contract's one int, plus the sample count
the server logs), then the model traffic on TAG_MODEL. A SYNC_WHEN_READY
sync (sharded servers' workers in turns) pushes only once the server has
sent READY (TAG_READY) as it takes the worker up, and its reply then drains
while the server takes up the next worker. FINISHED carries n_k = 0 and is
answered with a notice on TAG_NOTICE, int64 [code, sender, value], code 0.
A server that gives up (an unknown or malformed control message, an error in
its own update) sends every running worker a notice with the reason, drains
what they still send, waits for each one's FINISHED and raises ProtocolError,
which every worker raises too. No rank is left blocked and no message unreceived.

Fairness. The server serves the head of its ControlQueue (control_queue.py:
one Irecv per worker, arrivals in round-robin order), then re-posts that
worker's Irecv, so a worker in a tight loop cannot starve the others.

Shards. With `servers = S` > 1, ranks 0..S-1 each serve one contiguous shard
[lo, hi) of the flat buffer (buffers.shard_bounds) with this same loop and
their own counts, log and ServerStats. A server that gives up tells its
workers, which answer it and finish with the others; then the servers agree
(round_end.py) and all raise, or servers 1..S-1 send their shard to rank 0,
whose params then hold the whole center. Where the rule depends on the
service order (asgd/masgd's barrier_period), servers 1..S-1 serve in rank 0's
order (service_order.py); otherwise a worker meets its servers in turns
(server_worker.py).

Losing a worker. With survive_worker_loss (an MPI with ULFM: psgd/ulfm.py)
a worker whose process dies is dropped, not a reason to give up: the server
names it on stderr (worker_lost: held replies forget it, barriers stop
waiting for it) and serves the others to the end of the round; whatever of
its last update had arrived stays applied. Refused with S > 1: every server
would have to see the same loss at the same sync.

Idle waits poll, spinning only where a message is likely and sleeping with a
backoff up to `poll_max_sleep` otherwise (waiting.py), because MPICH and Open
MPI spin in a blocking receive. While it serves a worker the server uses
blocking calls: that time is busy.
"""
import time

import numpy as np
from mpi4py import MPI

from .. import mpi, pieces, trace
from ..buffers import host_copy, shard_bounds
from ..errors import ProtocolError, UsageError
from ..protocol import (CONTROL_SLOTS, MSG_FINISHED, MSG_SYNC_WHEN_READY, NOTICE_DONE,
                        NOTICE_SERVER_ERROR, TAG_MSG, TAG_READY)
from . import round_end
from .base import Algorithm
from .center_average import CenterAverage
from .control_queue import ControlQueue
from .in_flight import InFlight, Transfer
from .server_failure import LOST, GivingUp
from .server_options import refuse_survival_with_shards
from .server_stats import ServerStats, Service  # noqa: F401  (re-exported)
from .service_order import ServiceOrder
from .waiting import Waiter

_READY = np.zeros(1, dtype=np.uint8)     # the payload of READY


class Server(GivingUp, Algorithm):
    """Ranks 0..S-1: each serves its shard until every worker has finished.
    Subclasses implement serve(rank) -> the update count of the center sent
    back, or None when the reply is held (then they call reply_held later)."""

    role = "server"
    server_based = True
    in_pieces = True            # model messages in pieces (pieces.py)
    GLOBAL_STATE = SHARDED_STATE = ("center", "average")
    OPTIONAL_STATE = ("average",)   # from a job that kept none: a = x

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        refuse_survival_with_shards(self)
        bounds = shard_bounds(self.buffer.size, self.servers)
        self.shard = bounds[self.node.rank]         # [lo, hi): the elements this rank serves
        self.piece = pieces.algorithm_piece(self.exchange, self.in_pieces, self.survive_worker_loss)
        def part(exchange, lo, hi):     # in pieces where the algorithm says so
            return pieces.server_part(exchange, lo, hi, self.piece)
        self.center_exchange = part(self.exchange, *self.shard)
        # x: the whole buffer with one server, else a view of this shard
        self.center = self.buffer if self.servers == 1 else self.center_exchange.buffer
        self._gather = [part(self.exchange, lo, hi) for lo, hi in bounds]
        self.average = None
        if self.average_examples > 0:     # a: whole, as x is on rank 0, each server its shard
            whole = mpi.Exchange(self.comm, self.buffer.like())
            self.model_buffer = whole.buffer
            self._gather += [part(whole, lo, hi) for lo, hi in bounds]
            self.average = CenterAverage(self.center, self._gather[-self.servers + self.node.rank]
                                         .buffer, self.average_examples)
        else:
            self.model_buffer = self.buffer         # what a job evaluates and writes
        self.incoming = self.center.like()          # w_k or delta_k, as received
        self.incoming_exchange = part(mpi.Exchange(self.comm, self.incoming), 0, self.incoming.size)

    def initialized(self):
        self.server_comm = self.order = None
        if self.servers > 1:                        # collective with the workers' Split
            self.server_comm = self.comm.Split(0, self.node.rank)
            if self.one_order():
                self.order = ServiceOrder(self.comm, self.node.rank, self.servers)
        self.workers_ranks = list(range(self.servers, self.node.size))
        self.running = set(self.workers_ranks)
        self.lost = {}                              # rank -> syncs served when it was lost
        self.log = []                               # Service entries, in service order
        self.finished = []                          # (rank, syncs served when it finished)
        self.stats = None
        self.failure = None
        self.notice_sent = None                     # [code, sender, value] when it gave up
        self.control = ControlQueue(self.comm, self.servers, self.node.size,
                                    Waiter(self.poll_max_sleep), lossy=self.survive_worker_loss)
        self.in_flight = InFlight(self.comm, self.piece)
        # the sends of the last reply in line, by piece (pieces.py); empty
        # outside run(), which settles them as it ends: a reset or a load
        # between rounds never meets a reply still draining
        self.replying = []
        self.when_ready = False     # the sync being served: MSG_SYNC_WHEN_READY
        self._new_round = False
        super().initialized()                       # restart(): started_from

    def begin_round(self):
        """Serve another round (an epoch) with the next run(); the workers
        call begin_round() too. The log and the sync count go on."""
        self.check_open("begin_round")
        if self.running:
            raise UsageError("%s server: begin_round() before run() has returned" % self.name)
        self._new_round = True

    def synchronize(self, n_k):
        raise UsageError("rank %d is a %s server: call run(), not synchronize()" % (
            self.node.rank, self.name))

    def exit_action(self):
        """A server that never ran while a worker has asked for it: the
        workers wait in their first sync for ever."""
        if self.comm is None or self.stats is not None:
            return None, None
        deadline = time.time() + 1.0
        control, status = np.zeros(CONTROL_SLOTS, dtype=np.int64), MPI.Status()
        while time.time() < deadline:
            if self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_MSG, status=status):
                # a worker's FINISHED needs no answer; a sync waits for one. The
                # receive names the sender: across hosts MPICH's UCX never matches
                # an ANY_SOURCE receive with a small message already arrived
                self.comm.Recv([control, MPI.INT64_T], source=status.Get_source(), tag=TAG_MSG)
                if control[0] != MSG_FINISHED:
                    which = ("the %s server" if self.servers == 1 else
                             "one of the %s servers") % self.name
                    return "abort", "rank %d, %s, exits without ever calling run() while " \
                                    "its workers wait for it" % (self.node.rank, which)
            else:
                time.sleep(0.05)
        return None, None

    def state_dict(self):
        state = {"center": host_copy(self.center.data)}      # this rank's shard of x
        if self.average is not None:
            self.average.fold()
            state["average"] = host_copy(self.average.average.data)
        return state

    def _load_state(self, state):
        self.center.data[...] = self.buffer.xp.asarray(state["center"])
        self.restart()
        if self.average is not None and "average" in state:
            self.average.average.data[...] = self.buffer.xp.asarray(state["average"])

    def restart(self):
        # rank -> update count of the x it last got: every worker holds x now
        self.started_from = {rank: self.syncs for rank in self.workers_ranks}
        if self.average is not None:
            self.average.restart()

    # the event loop ------------------------------------------------------------
    def run(self):
        self.check_open("run")
        if self.failure is not None:
            raise ProtocolError(self.failure)
        if self.stats is not None and not self._new_round:
            raise UsageError("%s server: run() was already called (begin_round() first "
                             "to serve another round)" % self.name)
        self._new_round = False
        self.running = set(self.workers_ranks) - set(self.lost)
        stats = self.stats = ServerStats(per_worker={r: [0, 0] for r in self.running})
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            self._serve_all(stats)
            self.settle()
        except KeyboardInterrupt:
            raise
        except BaseException:
            self.settle()
            round_end.end_shards(self, failed=True)
            raise
        if self.average is not None:
            self.average.fold()
        round_end.end_shards(self, failed=False)
        stats.wall_s = time.perf_counter() - wall
        stats.cpu_s = time.process_time() - cpu
        stats.syncs, stats.samples, stats.finished = self.syncs, self.samples, len(self.finished)
        self.busy_s, self.idle_s = stats.busy_s, stats.idle_s
        return stats

    def _serve_all(self, stats):
        for rank in self.running:
            self.control.post(rank)
        follows = self.order is not None and not self.order.leads
        while self.running:
            if follows:
                entry = self.order.next_entry(self, stats)
            else:
                if self.control or self._guarded(self._arrivals):
                    self.poll_control(block=False)
                else:
                    start = time.perf_counter()
                    idle = trace.now() if trace.recorder is not None else None
                    self.poll_control(block=True)
                    stats.idle_s += time.perf_counter() - start
                    if idle is not None:
                        trace.recorder.part(trace.IDLE, idle, trace.now())
                    self._guarded(self._arrivals)
                if self.control.lost:
                    self._lose(self.control.lost)
                if not self.control:
                    continue
                entry = self.control.popleft()
            start = time.perf_counter()
            began = trace.now() if trace.recorder is not None else None
            served = self._guarded(self._dispatch, *entry)
            if served is LOST:
                continue
            stats.busy_s += time.perf_counter() - start
            if began is not None and entry[1] != MSG_FINISHED and served is None:
                self._traced_serve(entry[0], began)

    def settled(self):
        """The last reply's sends, by piece, handed over to the serve that
        writes over their pieces next (pieces.serve waits for each)."""
        replying, self.replying = self.replying, []
        return replying

    def settle(self):
        """Wait for the last reply's sends: in run(), before anything but a
        serve in pieces writes x, and as it ends."""
        for request in self.settled():
            request.wait()

    def one_order(self):
        """Whether every shard must serve in one order (subclasses say)."""
        return False

    def give_up_after_leader(self):
        """A follower told that rank 0 gave up: so does it (raises)."""
        self._give_up(NOTICE_SERVER_ERROR, 0, 0, "server rank 0 stopped")

    def close(self):
        if self.comm is not None and self.server_comm is not None:
            self.server_comm.Free()
            self.server_comm = None
        super().close()

    def _dispatch(self, rank, message, n_k, arrived):
        """Serve one control message; the Transfer of a sync served in the
        background (in_flight.py), else None."""
        self.control.last_served = rank
        if self.order is not None and self.order.leads:
            self.order.tell(rank)
        if message == MSG_FINISHED:
            self._notify(rank, NOTICE_DONE)
            self.running.discard(rank)
            self.finished.append((rank, self.syncs))
            self.worker_finished(rank)
            return
        self._note_staleness(rank)
        self.when_ready = message == MSG_SYNC_WHEN_READY
        if self.when_ready:                     # its push waits for this
            self.comm.Send([_READY, MPI.BYTE], dest=rank, tag=TAG_READY)
        reply = self.serve(rank)
        if isinstance(reply, Transfer):         # logged (and traced) once its update is in
            reply.n_k, reply.arrived = n_k, arrived
            return reply
        self._applied(rank, n_k, reply, arrived)
        return None

    def _arrivals(self):
        """Apply the updates of the transfers in flight that have arrived,
        listen again to the workers whose reply has gone (in_flight.py);
        whether any did."""
        if not self.in_flight:                  # the usual case: every link alike
            return False
        done = self.in_flight.done()
        for transfer in done:
            start = time.perf_counter()
            began = trace.now() if trace.recorder is not None else None
            rank = transfer.rank
            if transfer.n_k is not None:        # its update: not applied yet
                replying = transfer.replying
                self._note_staleness(rank)
                self.arrived(transfer)          # may send the reply now (asgd)
                self._applied(rank, transfer.n_k, transfer.reply, transfer.arrived,
                              listen=replying)
                transfer.n_k = None
                if began is not None:
                    self._traced_serve(rank, began)
                if not replying:
                    self.in_flight.resume(transfer)
            else:
                self.control.post(rank)
            if rank not in self.in_flight.transfers:
                self.in_flight.release(transfer)
            self.stats.busy_s += time.perf_counter() - start
        return bool(done)

    def _applied(self, rank, n_k, reply, arrived, listen=True):
        """A sync's update is in x: count and log it, and (`listen`) receive
        `rank`'s next control message."""
        self.stats.count_staleness(self._note_staleness(rank))
        if reply is not None:
            self.started_from[rank] = reply
        self.log.append(Service(rank, n_k, self.syncs, reply, arrived, self.staleness))
        self.syncs += 1
        self.samples += n_k
        if self.average is not None:
            self.average.updated(n_k)
        self.stats.per_worker[rank][0] += 1
        self.stats.per_worker[rank][1] += n_k
        if listen:
            self.control.post(rank)
        self.after_sync(rank)

    def _note_staleness(self, rank):
        """Updates x took since `rank` got its copy: the sync served now."""
        self.staleness = self.syncs - self.started_from.get(rank, 0)
        return self.staleness

    def _traced_serve(self, rank, began):
        trace.recorder.add(trace.SERVE, began, trace.now(), {
            "worker": rank, "sync": self.syncs - 1, "staleness": self.staleness})

    def serve(self, rank):
        raise NotImplementedError

    def in_background(self, rank):
        """Whether to serve `rank`'s sync in the background (in_flight.py):
        its link is slow. Not when a dead worker must fail the call that
        names it (survive_worker_loss)."""
        return not self.survive_worker_loss and self.in_flight.slow(rank)

    def arrived(self, transfer):
        """The update of a sync served in the background (in_flight.py)."""
        raise NotImplementedError

    def replied(self, rank):
        """Called when a held reply has sent `rank` the current center."""

    def after_sync(self, rank):
        """Called after every sync is logged (barriers release here)."""

    def worker_finished(self, rank):
        """Called when `rank` finished; self.running no longer holds it."""

    def worker_lost(self, rank):
        """Called when `rank`'s process died; self.running no longer holds it."""
        self.worker_finished(rank)

    def reply_held(self, ranks):
        """Answer the workers of the latest len(ranks) syncs, whose replies were
        held, all with the current center."""
        for rank in ranks:
            self.center_exchange.send(rank)
            self.started_from[rank] = self.syncs
            self.replied(rank)
        for i in range(len(self.log) - len(ranks), len(self.log)):
            self.log[i] = self.log[i]._replace(reply=self.syncs)

    def poll_control(self, block):
        """Queue the control messages that arrived (with `block`, wait for
        one); the first bad one makes the server give up."""
        bad = self.control.poll(block, self.stats, self.syncs,
                                also=self.in_flight.any_done if self.in_flight else None)
        if bad:
            code, rank, value, text = bad[0]
            self._give_up(code, rank, value, text)

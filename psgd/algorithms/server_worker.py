"""The worker side of the server algorithms' wire protocol (server.py holds
the protocol's description and rank 0's event loop): control messages, the
wait for the server's answer, FINISHED and its acknowledgement, and the
failure notices every worker turns into the server's error. With S > 1
servers each shard of the model is traded with its own server. Where the
servers keep one service order (asgd/masgd's barrier) a sync's control
message goes to every server and all shards travel at once. Otherwise
worker k trades its shards in turns, shard (k + j) mod S in turn j, and
sends each server its control message when that server's turn comes: the
workers then talk to different servers at any moment (all at once, every
server tended to pick the same worker first and the other workers' links
sat idle). A turn asks for READY (MSG_SYNC_WHEN_READY) and pushes once it
has come, and the next turn begins as soon as the push has gone, while the
reply still comes in: the next server's link then starts when that server
is free, not when this worker's last reply has drained, and an eager push
never lands on a server still receiving another's. The measurements are
in benchmarks/FINDINGS.md ("Across hosts: the cluster regime" for the
turns, "Turns that wait for READY" and the sections after it)."""
import functools

import numpy as np
from mpi4py import MPI

from .. import kernels, mpi, pieces, trace, ulfm
from ..buffers import shard_bounds
from ..errors import ProtocolError, ServerDiedError, UsageError
from ..protocol import (MSG_FINISHED, MSG_SYNC, MSG_SYNC_WHEN_READY, NOTICE_DONE, TAG_MSG,
                        TAG_NOTICE, TAG_READY, notice_text)
from .base import Algorithm
from .sample_count import check_count
from .server_options import refuse_survival_with_shards
from .waiting import Waiter

NO_NOTICE = -1      # a notice slot not yet written
# The worker's work under a transfer goes in pieces of this many elements,
# MPI polled between them: a pass over 2 MB takes well under the 4 ms that
# even 256 KiB socket buffers (512 KB) last at 1 Gb/s (psgd/_tcp_buffers.py).
WORK_PIECE = 2 ** 19


def work_pieces(lo, hi):
    """[lo, hi) cut into [(a, b)] of at most WORK_PIECE elements."""
    return [(a, min(a + WORK_PIECE, hi)) for a in range(lo, hi, WORK_PIECE)]


def _server_may_die(method):
    """Under ULFM a dead server is an MPI error in whatever call meets it:
    say so (no job survives its server)."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except MPI.Exception as exc:
            if not ulfm.failed_on(exc, self.comm):
                raise
            raise ServerDiedError(self.name, "died (%s)" % ulfm.failure_string(exc)) from None
    return guarded


class ServerWorker(Algorithm):
    """Ranks S..P-1 of a server algorithm. Subclasses implement
    exchange_with_server(): the model traffic after the control message,
    waiting through await_server() so a failure notice can interrupt it;
    and pulled(): the worker's step from the x received into pull_parts."""

    server_based = True
    server = None   # the Server subclass rank 0 runs
    pull_parts = None   # [Exchange part of shard s] the pulled x is received into

    @classmethod
    def for_rank(cls, rank, servers=1):
        return cls.server if rank < servers else cls

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        refuse_survival_with_shards(self)
        self.shards = shard_bounds(self.buffer.size, self.servers)   # [(lo, hi)] of each server
        self.piece = pieces.algorithm_piece(self.exchange, self.in_pieces, self.survive_worker_loss)

    def initialized(self):
        if self.servers > 1:                # collective with the servers' Split
            self.comm.Split(MPI.UNDEFINED, self.node.rank)
        self._control = np.zeros(2, dtype=np.int64)
        self._ready = np.zeros(1, dtype=np.uint8)
        self._notice = np.zeros((self.servers, 3), dtype=np.int64)   # one per server
        self._post_notices()
        self.stopped = False
        self.in_round = False           # synced since the last stop()
        self.failure = None
        self._waiter = Waiter(self.poll_max_sleep, anticipate=False)
        if self.servers > 1:    # not in a turn's pulled(), holding a server others wait for
            kernels.load_loops(self.buffer.data)
        super().initialized()

    @_server_may_die
    def synchronize(self, n_k):
        """Push this block (n_k samples) and pull the center; returns True."""
        self.check_open("synchronize")
        n_k = self._count(n_k, "synchronize")
        self.land()
        self._check_running()
        self.in_round = True
        rec = trace.recorder
        if rec is not None:
            start = trace.now()
        self.before_push()
        self.send_and_receive(n_k)
        if rec is not None:
            rec.sync(start, trace.now(), self.syncs, collective=False)
        self.syncs += 1
        self.samples += n_k
        return True

    @_server_may_die
    def stop(self, n_k=0):
        """Push the last partial block (when n_k > 0), then send FINISHED."""
        self.check_open("stop")
        if self.stopped and self.failure is None:
            return
        n_k = self._count(n_k, "stop")
        if n_k > 0:
            self.synchronize(n_k)
        self.land(before_sync=False)
        self._check_running()
        self._send_control(MSG_FINISHED, 0)
        self.stopped, self.in_round = True, False
        MPI.Request.Waitall(self._notice_requests)   # "done", or why a server gave up
        if (self._notice[:, 0] != NOTICE_DONE).any():
            self._fail(acknowledge=False)

    def begin_round(self):
        """After stop(): take part in another round (an epoch) that the
        server serves with its next run()."""
        self.check_open("begin_round")
        if self.failure is not None:
            raise ProtocolError(self.failure)
        if not self.stopped:
            raise UsageError("%s worker %d: begin_round() before stop()" % (
                self.name, self.node.rank))
        self._post_notices()
        self.stopped = False

    def _post_notices(self):
        self._notice[:, 0] = NO_NOTICE
        self._notice_requests = [self.comm.Irecv([self._notice[s], MPI.INT64_T], source=s,
                                                 tag=TAG_NOTICE) for s in range(self.servers)]

    @property
    def in_pieces(self):
        """Whether model messages go in pieces (pieces.py): the server's choice."""
        return self.server.in_pieces

    def shard_parts(self, exchange):
        """[Exchange of shard s's elements] for s = 0..S-1."""
        return [pieces.server_part(exchange, lo, hi, self.piece) for lo, hi in self.shards]

    def one_order(self):
        """Whether every server serves in one order (the servers' rule, which
        the worker's options decide alike): then a sync goes to all at once."""
        return self.server.one_order(self)

    def turns(self):
        """The servers of a sync, as the groups traded one after the other
        (module docstring): [all] or [[(k + j) mod S] for each turn j]."""
        everyone = range(self.servers)
        if self.servers == 1 or self.one_order():
            return [everyone]
        k = self.node.rank - self.servers
        return [[(k + j) % self.servers] for j in everyone]

    def send_and_receive(self, n_k):
        """A sync's messages, after before_push(): control and model to each
        turn's servers, then after_pull()."""
        turns = self.turns()
        self.taken = [False] * self.servers     # shards whose pulled() has run
        # in turns, each waits for READY, and a turn's push goes as soon as
        # the last one's has gone and its server is ready, while earlier
        # turns' replies still come in (module docstring)
        when_ready = len(turns) > 1
        replies = []            # (server, receive) of the turns pushed so far
        for servers in turns:
            if when_ready:
                # a server that has sent READY waits for the push, so even
                # when another server has given up the push goes, and this
                # worker fails after it (in the next wait)
                self._send_control(MSG_SYNC_WHEN_READY, n_k, servers)
                gone = self.await_server([(s, self._ready_from(s)) for s in servers],
                                         also=replies, fail=False)
                servers = [s for s in servers if s not in gone]
            else:
                self._send_control(MSG_SYNC, n_k, servers)
            receives, sends, work = self.exchange_with_server(servers, replies)
            if when_ready:
                self.await_server([], sends, work=work, also=replies + receives)
            else:
                self.await_server(receives, sends, work=work)
            replies += receives
            if when_ready and gone:
                self._fail()
        if when_ready:
            self.await_server(replies, poll=self.landing(replies))
        self.after_pull()

    def _ready_from(self, server):
        return mpi.Request([self.comm.Irecv([self._ready, MPI.BYTE], source=server,
                                            tag=TAG_READY)])

    def exchange_with_server(self, servers, replies):
        """The model traffic with `servers` (after their control message),
        posted: returns (receives, sends, work) for await_server. `replies`:
        (server, receive) of the earlier turns, in or still coming in."""
        raise NotImplementedError

    def pulled(self, lo, hi):
        """The worker's step from the x it pulled, on elements [lo, hi)."""
        raise NotImplementedError

    def pulled_work(self, replies):
        """pulled() on the shards whose reply (of `replies`, earlier turns')
        is in, as work pieces run under a later turn's transfer."""
        work = []
        for s, reply in replies:
            if not self.taken[s] and reply.test():
                work += [functools.partial(self.pulled, a, b)
                         for a, b in work_pieces(*self.shards[s])]
                self.taken[s] = True
        return work

    def landing(self, replies):
        """pulled() on the last replies as they land, each poll on what
        landed since the last, so what is left once the last one is in is a
        piece, not a shard (FINDINGS, "The last reply taken as it lands"): a
        callable for await_server's poll, or None. Pieces from one server
        land in order (MPI matches them in order); a staged reply lands
        whole, at its stage-in, and after_pull takes it."""
        landing = {s: (reply.requests, self.pull_parts[s].pieces(), [0])
                   for s, reply in replies if not self.taken[s]
                   and self.pull_parts[s].direct and len(reply.requests) > 1}
        for s in landing:       # await_server's last poll, all in, takes the rest
            self.taken[s] = True

        def take_landed():      # what landed since the last poll, in one call
            for s, (requests, bounds, next_) in landing.items():
                first = j = next_[0]
                while j < len(requests) and requests[j].Test():
                    j += 1
                if j > first:
                    base = self.shards[s][0]
                    self.pulled(base + bounds[first][0], base + bounds[j - 1][1])
                next_[0] = j
        return take_landed if landing else None

    def after_pull(self):
        """pulled() on every shard not taken yet, once every reply is in."""
        for s in range(self.servers):
            if not self.taken[s]:
                self.pulled(*self.shards[s])
        self.taken = [True] * self.servers

    def land(self, before_sync=True):
        """Finish the exchange the last sync left in flight, if it did
        (easgd's overlap.py): before the next sync (before_sync), stop, or
        exit."""

    def _reset_problem(self):
        if self.in_round:
            return ("%s worker %d: reset_to during a round; call it after stop() (and the "
                    "server's run())" % (self.name, self.node.rank))
        return None

    def close(self):
        """Collective: withdraw the notice receive still posted, then free."""
        if self.comm is not None:
            self._land_quietly()
            for request in self._notice_requests:
                if request != MPI.REQUEST_NULL:
                    request.Cancel()
                    request.Wait()
        super().close()

    def await_server(self, receives, sends=(), stage_in=True, work=(), also=(), fail=True,
                     poll=None):
        """Wait for this exchange's requests ((server, mpi.Request) pairs of
        Exchange.irecv/isend) unless a server's notice comes first: then
        withdraw the receives from that server, let the others finish,
        acknowledge and raise. Returns once the receives are staged in
        (stage_in), or only arrived: MPI calls alone, so the transfer thread
        may wait (overlap.py). `work`: callables, each a small piece of work
        that does not touch this exchange's buffers, run one at a time with
        MPI polled between them (over TCP a transfer moves only while its
        ranks poll, waiting.py), all of them run before this returns.
        Waits by the Waiter's policy: MPI's Waitany would spin for as long as
        the servers take. `also`: receives ((server, mpi.Request) pairs)
        not waited for here but withdrawn with these when their server's
        notice comes. Without `fail`, returns the servers that gave up
        instead of raising. `poll`: called between the tests and once
        after the last (landing())."""
        pending = [r for _, request in list(receives) + list(sends) for r in request.requests]
        for piece in work:
            piece()
            MPI.Request.Testall(pending)
        failed = set()
        rec = trace.recorder
        if rec is not None:
            start = trace.now()

        def outcome():      # None while the exchange is not done and no new notice came
            if MPI.Request.Testall(pending):
                return "done", None
            if poll is not None and not failed:     # a withdrawn receive landed nothing
                poll()
            gone = [s for s in range(self.servers)
                    if s not in failed and self._notice_requests[s].Test()]
            return ("notice", gone[0]) if gone else None
        while pending:
            what, gone = self._waiter.wait(outcome)
            if what == "done":
                break
            failed.add(gone)
            for s, request in list(receives) + list(also):
                if s == gone:
                    request.cancel()
            for s, request in sends:           # they complete: the server drains them
                if s == gone:
                    request.wait()
        for s, request in receives:
            if stage_in and s not in failed:
                request.wait()                 # the stage-in
        if poll is not None and not failed:
            poll()
        if rec is not None:
            rec.part(trace.WITH_SERVER, start, trace.now())
        if failed and fail:
            self._fail()
        return failed

    def exit_action(self):
        if self.comm is None or self.stopped or self.failure is not None:
            return None, None
        if self.syncs == 0:
            return "quiet-stop", None   # no round begun (--epochs 0): nothing to warn of
        return "stop", "exits without stop() on its %s worker" % self.name

    def stop_at_exit(self):
        """FINISHED to the server, without waiting for its answer: it may
        never come (the server may be exiting too)."""
        self._land_quietly()
        self._send_control(MSG_FINISHED, 0)
        self.stopped = True

    def _land_quietly(self):
        """An exchange still in flight as the worker leaves: finish it, so no
        thread of this worker calls MPI behind it; its failure is not news."""
        try:
            self.land(before_sync=False)
        except Exception:                       # noqa: BLE001 (raised by whoever failed first)
            pass

    def before_push(self):
        """This worker's work before the control message of a sync (an
        error here reaches no server)."""

    def _send_control(self, message, n_k, servers=None):
        self._control[:] = (message, n_k)
        for server in range(self.servers) if servers is None else servers:
            self.comm.Send([self._control, MPI.INT64_T], dest=server, tag=TAG_MSG)

    def _count(self, n_k, call):
        n_k, problem = check_count(n_k, self.node.size)
        if problem:
            raise UsageError(problem.replace("synchronize(", call + "("))
        return n_k

    def _check_running(self):
        if self.failure is not None:
            raise ProtocolError(self.failure)
        if self.stopped:
            raise UsageError("%s worker %d: synchronize after stop (begin_round() starts another "
                             "round)" % (self.name, self.node.rank))
        if any(request.Test() for request in self._notice_requests):
            self._fail()

    def _fail(self, acknowledge=True):
        """A server gave up: FINISHED to every server (the one that gave up
        waits for it, the others end this worker's round), each one's last
        notice received, then raise the first failing server's reason."""
        if acknowledge:
            self._send_control(MSG_FINISHED, 0)
            MPI.Request.Waitall(self._notice_requests)
        gone = [s for s in range(self.servers)
                if self._notice[s, 0] not in (NO_NOTICE, NOTICE_DONE)]
        code, sender, value = (int(v) for v in self._notice[gone[0]])
        server = "server" if self.servers == 1 else "server (rank %d)" % gone[0]
        self.failure = "rank %d: the %s %s stopped: %s" % (
            self.node.rank, self.name, server, notice_text(code, sender, value))
        self.stopped = True
        raise ProtocolError(self.failure)

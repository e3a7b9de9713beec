"""The worker side of the server algorithms' wire protocol (server.py holds
the protocol's description and rank 0's event loop): control messages, the
wait for the server's answer, FINISHED and its acknowledgement, and the
failure notices every worker turns into the server's error."""
import numpy as np
from mpi4py import MPI

from .. import mpi
from ..errors import ProtocolError, UsageError
from .base import Algorithm, _check_count
from .server import NOTICE_DONE, NOTICE_MALFORMED, NOTICE_UNKNOWN, TAG_NOTICE
from .waiting import Waiter


class ServerWorker(Algorithm):
    """Ranks 1..P-1 of a server algorithm. Subclasses implement
    exchange_with_server(): the model traffic after the control message,
    waiting through await_server() so a failure notice can interrupt it."""

    server_based = True
    server = None   # the Server subclass rank 0 runs
    poll_max_sleep: float       # SERVER_OPTIONS: the longest sleep of await_server too

    @classmethod
    def for_rank(cls, rank):
        return cls.server if rank == mpi.MAIN_RANK else cls

    def initialized(self):
        self._control = np.zeros(2, dtype=np.int64)
        self._notice = np.zeros(3, dtype=np.int64)
        self._notice_request = self.comm.Irecv([self._notice, MPI.INT64_T],
                                               source=mpi.MAIN_RANK, tag=TAG_NOTICE)
        self.stopped = False
        self.in_round = False           # synced since the last stop()
        self.failure = None
        self._waiter = Waiter(self.poll_max_sleep, anticipate=False)
        super().initialized()

    def synchronize(self, n_k):
        """Push this block (n_k samples) and pull the center; returns True."""
        n_k = self._count(n_k, "synchronize")
        self._check_running()
        self.in_round = True
        self._send_control(mpi.MSG_SYNC, n_k)
        self.exchange_with_server()
        self.syncs += 1
        self.samples += n_k
        return True

    def stop(self, n_k=0):
        """Push the last partial block (when n_k > 0), then send FINISHED."""
        if self.stopped and self.failure is None:
            return
        n_k = self._count(n_k, "stop")
        if n_k > 0:
            self.synchronize(n_k)
        self._check_running()
        self._send_control(mpi.MSG_FINISHED, 0)
        self.stopped, self.in_round = True, False
        self._notice_request.Wait()       # "done", or why the server gave up
        if self._notice[0] != NOTICE_DONE:
            self._fail(acknowledge=False)

    def begin_round(self):
        """After stop(): take part in another round (an epoch) that the
        server serves with its next run()."""
        if self.failure is not None:
            raise ProtocolError(self.failure)
        if not self.stopped:
            raise UsageError("%s worker %d: begin_round() before stop()" % (
                self.name, self.node.rank))
        self._notice_request = self.comm.Irecv([self._notice, MPI.INT64_T],
                                               source=mpi.MAIN_RANK, tag=TAG_NOTICE)
        self.stopped = False

    def exchange_with_server(self):
        raise NotImplementedError

    def _reset_problem(self):
        if self.in_round:
            return ("%s worker %d: reset_to during a round; call it after stop() (and the "
                    "server's run())" % (self.name, self.node.rank))
        return None

    def close(self):
        """Collective: withdraw the notice receive still posted, then free."""
        if self.comm is not None and self._notice_request != MPI.REQUEST_NULL:
            self._notice_request.Cancel()
            self._notice_request.Wait()
        super().close()

    def await_server(self, receives, sends=()):
        """Wait for this exchange's requests (mpi.Request of Exchange.irecv/
        isend) unless the server's notice comes first: then withdraw the
        receives, acknowledge and raise. Returns once the receives are staged in.
        Waits by the Waiter's policy: MPI's Waitany would spin for as long as
        the server takes."""
        pending = [r for request in list(receives) + list(sends) for r in request.requests]

        def outcome():      # None while neither the exchange nor a notice is done
            if MPI.Request.Testall(pending):
                return "done"
            return "notice" if self._notice_request.Test() else None
        if pending and self._waiter.wait(outcome) == "notice":
            for request in receives:
                request.cancel()
            for request in sends:              # they complete: the server drains them
                request.wait()
            self._fail()
        for request in receives:
            request.wait()                     # the stage-in

    def exit_action(self):
        if self.comm is None or self.stopped or self.failure is not None:
            return None, None
        if self.syncs == 0:
            return "quiet-stop", None   # no round begun (--epochs 0): nothing to warn of
        return "stop", "exits without stop() on its %s worker" % self.name

    def stop_at_exit(self):
        """FINISHED to the server, without waiting for its answer: it may
        never come (the server may be exiting too)."""
        self._send_control(mpi.MSG_FINISHED, 0)
        self.stopped = True

    def _send_control(self, message, n_k):
        self._control[:] = (message, n_k)
        self.comm.Send([self._control, MPI.INT64_T], dest=mpi.MAIN_RANK, tag=mpi.TAG_MSG)

    def _count(self, n_k, call):
        n_k, problem = _check_count(n_k, self.node.size)
        if problem:
            raise UsageError(problem.replace("synchronize(", call + "("))
        return n_k

    def _check_running(self):
        if self.failure is not None:
            raise ProtocolError(self.failure)
        if self.stopped:
            raise UsageError("%s worker %d: synchronize after stop (begin_round() starts another "
                             "round)" % (self.name, self.node.rank))
        if self._notice_request.Test():
            self._fail()

    def _fail(self, acknowledge=True):
        code, sender, value = (int(v) for v in self._notice)
        what = {NOTICE_UNKNOWN: "unknown control message %d from rank %d" % (value, sender),
                NOTICE_MALFORMED: "malformed control message from rank %d" % sender,
                }.get(code, "it failed (see rank 0's error)")
        self.failure = "rank %d: the %s server stopped: %s" % (self.node.rank, self.name, what)
        if acknowledge:
            self._send_control(mpi.MSG_FINISHED, 0)
        self.stopped = True
        raise ProtocolError(self.failure)

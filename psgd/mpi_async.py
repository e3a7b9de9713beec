"""Transfers that run while the caller computes (Horovod's `*_async` and
`synchronize(handle)`): one thread per process carries them out, one at a
time and in the order they were started, so the ranks, which start them in
the same order, post their collectives in the same order. MPI then is
called from that thread while the caller computes, which needs
MPI_THREAD_MULTIPLE; without it the transfer runs at once, in the caller.
"""
import os
import queue
import threading
import time

from mpi4py import MPI

# Seconds between two tests of a transfer in flight. A blocking MPI call
# would spin on a core the caller's backward needs; between tests the
# thread sleeps, and MPI progresses the transfer at each test.
POLL_S = 1e-4

THREAD_NAME = "psgd-transfers"
_lock = threading.Lock()
_jobs = None


class Handle:
    """One started transfer; wait() returns once it is done (and raises what
    it raised)."""

    def __init__(self):
        self._finished = threading.Event()
        self._error = None

    def done(self):
        return self._finished.is_set()

    def wait(self):
        self._finished.wait()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self, job):
        try:
            job()
        except BaseException as exc:     # handed to the waiter, raised there
            self._error = exc
        finally:
            self._finished.set()


class InFlight:
    """What carries one transfer at a time as a Handle in `_handle` (psgd.torch's
    buckets): wait() for it, and whether it was started and is done."""

    _handle = None

    def wait(self):
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.wait()

    @property
    def started(self):
        return self._handle is not None

    def done(self):
        """Whether its transfer has arrived (tests ask while backward runs)."""
        return self._handle is not None and self._handle.done()


def threaded():
    """Whether transfers run on the transfer thread (MPI allows it)."""
    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


def start(job, device=None, here=False):
    """Run `job()` (MPI calls on a communicator, nothing else) after the
    jobs started before it, with `device` (a CuPy device) current; returns
    its Handle at once. `here`: run it in the caller before returning (the
    caller has waited for the jobs before it)."""
    handle = Handle()
    if device is not None:
        job = _on(device, job)
    if here or not threaded():
        handle._run(job)
        return handle
    _queue().put((handle, job))
    return handle


def poll(done):
    """Until `done()` (which progresses MPI): on the transfer thread with a
    sleep between tests; in the caller, which has nothing else to do, at
    once, but offering its core between tests: with more ranks than cores
    the peers it spins against need that core to send it their part."""
    pause = POLL_S if threading.current_thread().name == THREAD_NAME else 0
    while not done():
        if pause:
            time.sleep(pause)
        else:
            os.sched_yield()


def _on(device, job):
    def run():
        with device:
            job()
    return run


def _queue():
    global _jobs
    with _lock:
        if _jobs is None:
            _jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_jobs,), name=THREAD_NAME,
                             daemon=True).start()
    return _jobs


def _serve(jobs):
    while True:
        handle, job = jobs.get()
        handle._run(job)

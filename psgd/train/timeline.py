"""The trainer's side of the timeline: every rank records (psgd/trace.py),
each epoch's spans come to rank 0 on its clock (the offsets are measured at
start-up), rank 0 names the straggler of the epoch and of the run, and with
--timeline writes the trace (Chrome's trace event format: Perfetto,
chrome://tracing) at each checkpoint and at the end.

Without --timeline only the spans the attribution reads are recorded (one
per sync, one per served sync on a server) and dropped once folded."""
import json
import os

import numpy as np

from .. import trace
from ..algorithms.tracing import chrome_events, write_trace
from ..errors import UsageError
from . import straggler


class Timeline:
    """Collective to create and to fold(); rank 0 write()s. `path`: the
    trace file (None: attribution only); `hosts`: each rank's host;
    `servers`: ranks 0..servers-1 serve (they take no part in the epoch-end
    rendezvous: their run() ends with the last worker's); `keep`: the events
    of the trace a resumed run goes on with."""

    def __init__(self, comm, path, hosts, servers=0, keep=()):
        self.comm, self.path, self.hosts, self.servers = comm, path, hosts, servers
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.offset = trace.clock_offsets(comm)
        self.recorder = trace.Recorder(detail=path is not None)
        trace.install(self.recorder)
        self.events = list(keep)              # rank 0, with a path: the trace so far
        self.named = bool(self.events)        # the tracks' names are among the events
        self.held = np.zeros(self.size)
        self.started = self.folded = trace.now()    # read on rank 0, whose clock it is
        self.arrived = None
        self.next_epoch()

    # what the trainer says ---------------------------------------------------------
    def arrive(self):
        """This rank has finished its epoch's work: the epoch's end begins."""
        self.recorder.pause()
        self.arrived = trace.now()

    def met(self, epoch):
        """After the epoch-end collective that every rank reaches."""
        server = self.rank < self.servers
        self.recorder.add(trace.SERVER_END if server else trace.ARRIVE, self.arrived,
                          trace.now(), {"epoch": epoch})

    def span(self, name, start, args=None):
        """A span from `start` to now (evaluation, checkpoint)."""
        self.recorder.part(name, start, trace.now(), args)

    def next_epoch(self):
        if self.rank >= self.servers:     # a server serves: it has no compute of its own
            self.recorder.resume()

    # rank 0 collects ------------------------------------------------------------------
    def fold(self):
        """Collective: this epoch's spans to rank 0. Returns, on rank 0, the
        straggler of the epoch (straggler.straggler's answer), else None."""
        spans = trace.gather(self.comm, self.recorder.take(), self.offset)
        if self.rank != 0:
            return None
        waits = [] if self.path is not None else None
        held, _ = straggler.attribute(spans, self.size, waits)
        self.held += held
        now = trace.now()
        wall, self.folded = now - self.folded, now
        if self.path is not None:
            for r, start, end, culprit in waits:
                spans[r].append((trace.WAITING, start, end, {"for": culprit}))
            self.events.extend(chrome_events(spans, self.hosts, self.servers,
                                             names=not self.named))
            self.named = True
        return straggler.straggler(held, wall, self.size - self.servers)

    def run_straggler(self):
        """Rank 0: the straggler over the whole run."""
        return straggler.straggler(self.held, trace.now() - self.started,
                                   self.size - self.servers)

    def write(self):
        """Rank 0: the trace so far, replacing the file atomically."""
        if self.rank == 0 and self.path is not None:
            write_trace(self.path, self.events)

    def close(self):
        trace.install(None)


def read_events(path):
    """The events of an earlier trace, which a resumed run goes on writing
    (none when there is no such file), or a UsageError naming the file."""
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        if not isinstance(events, list):
            raise TypeError("traceEvents is not a list")
        return events
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError("--timeline %s: cannot go on with this trace (%s); move it away "
                         "or name another file" % (path, exc))

"""psgd.create(..., timeline=PATH): the trace of an API user's job, every
rank's syncs (and a server's serves) on rank 0's clock, written by rank 0
at close(). The trainer's --timeline writes the same events
(psgd/train/timeline.py)."""
import json
import os

from .. import mpi, trace
from ..atomic import atomic_write


def problem(path, main):
    """Why `path` cannot take a trace (checked on rank 0), or None."""
    if trace.recorder is not None:
        return "timeline=%r: this process already records a timeline (one per process)" % path
    if main:
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            return "timeline=%r is a directory; give a file name" % path
        if not os.path.isdir(folder):
            return "timeline=%r: no folder %s" % (path, folder)
    return None


class Tracing:
    """Collective: records from here on; finish() writes the trace."""

    def __init__(self, comm, path, servers=0):
        self.comm, self.path, self.servers = comm, path, servers
        self.hosts = mpi.host_names(comm)
        self.offset = trace.clock_offsets(comm)
        self.recorder = trace.Recorder(detail=True)
        self.recorder.resume()
        trace.install(self.recorder)

    def finish(self):
        """Collective: every rank's spans to rank 0, which writes the trace."""
        trace.install(None)
        spans = trace.gather(self.comm, self.recorder.take(), self.offset)
        if spans is not None:
            write_trace(self.path, chrome_events(spans, self.hosts, self.servers))


def write_trace(path, events):
    """The trace file, replaced atomically."""
    text = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})
    atomic_write(path, lambda f: f.write(text), binary=False)


def chrome_events(spans, hosts, servers=0, names=True):
    """Complete events ("X", microseconds on rank 0's clock) and, with
    `names`, the names of the tracks: a process per host, a thread per rank."""
    order = list(dict.fromkeys(hosts))
    events = []
    for r, rank_spans in enumerate(spans):
        pid = order.index(hosts[r])
        if names:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": r,
                           "args": {"name": "host %s" % hosts[r]}})
            # tracks in rank order within a host, hosts in the order of their first rank
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": r,
                           "args": {"sort_index": pid}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": r,
                           "args": {"sort_index": r}})
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": r,
                           "args": {"name": "rank %d%s" % (r, " (server)" if r < servers
                                                          else "")}})
        for name, start, end, args in rank_spans:
            event = {"ph": "X", "name": name, "pid": pid, "tid": r,
                     "ts": round(start * 1e6, 1), "dur": round(max(end - start, 0) * 1e6, 1)}
            if args:
                event["args"] = args
            events.append(event)
    return events

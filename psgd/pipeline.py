"""The pipelined allreduce: a collective algorithm's update run chunk by
chunk under the sums of the neighbouring chunks (docs/algorithms.md, Fixes 1; docs/protocol.md).

A collective algorithm's update is elementwise, so it may run on any
partition of the buffer: the sum of chunk c is in flight (Iallreduce) while
the weighting pass of chunk c+1 and the filter of chunk c-1 run. Per chunk
the stream discipline of psgd/mpi.py holds as for one call: a chunk is
staged out (or its device work finished) before MPI gets it, and staged in
before `after` reads it. MPICH progresses a non-blocking collective only
inside MPI calls, so host work runs in PROGRESS_BLOCK pieces with a Test
between them.

Which buffers are pipelined depends on the path the bytes take
(benchmarks/FINDINGS.md). Between hosts (a network) every buffer of more
than one chunk is: at 1e6 float32 over TCP (np 2, ranks bound to cores)
bmuf's sync fell from 1.24-1.26x a bare Allreduce in one call to 0.99-1.02x
in two chunks, bsp's from 0.81-1.01x to 0.80-0.89x, and at 1e7 and up it
won too. Within one host (shared memory) only buffers of 4M elements and up
are: below, the pipeline tied at 1e6 and lost at 2e6-4e6 (bmuf 2.7-3.5x ->
3.1-4.3x), and it won from 1e7 on (a 40 MB sum in chunks that stay in
cache). 256k-1M elements per chunk did about equally well there. Across
hosts the chunk is 256k: the update of the last chunk has nothing left to
hide under, and with 512k a 1e6 buffer is two chunks, so half of sod's
update was exposed (2 hosts x 2 ranks at 1 Gb/s, quiet machine: sod 1.15x
the link floor in 512k chunks, 1.04x in 256k; every collective sync from
1e6 to 1e8 at 1.00-1.06x in 256k).

Device memory never goes to Iallreduce: Open MPI's CUDA support (UCX
included) leaves the non-blocking reductions out, so a CUDA-aware exchange
of a device buffer sums in one blocking call (the library pipelines its own
copies there); only host memory (a host buffer, or a device buffer's pinned
mirror) is pipelined.
"""
from mpi4py import MPI

from . import mpi, settings

ONE_HOST_THRESHOLD = 1 << 22        # ranks on one host: smaller buffers (16 MB) in one call
ACROSS_HOSTS_THRESHOLD = 0          # ranks on several hosts: every buffer of > 1 chunk
ONE_HOST_CHUNK = 1 << 19            # elements per Iallreduce (2 MB of float32)
ACROSS_HOSTS_CHUNK = 1 << 18
PROGRESS_BLOCK = 1 << 16            # host elements between two Tests
PIPELINE_DEPTH = 2                  # chunks in flight at once


def _by_the_path(name, across_hosts, one_host, across):
    """Setting `name` where set, else the value for the path of the bytes."""
    value = settings.get(name)
    if value is not None:
        return value
    return across if across_hosts else one_host


def pipeline_chunk(across_hosts=False):
    """Elements per pipelined Iallreduce on a communicator within one host
    or across several (never above the MPI count limit)."""
    return min(_by_the_path("PSGD_MPI_PIPELINE_CHUNK", across_hosts, ONE_HOST_CHUNK,
                            ACROSS_HOSTS_CHUNK), mpi.chunk_elements())


def pipeline_threshold(across_hosts=False):
    """The smallest buffer pipelined on a communicator within one host or
    across several (0: every buffer of > 1 chunk)."""
    return _by_the_path("PSGD_MPI_PIPELINE_THRESHOLD", across_hosts, ONE_HOST_THRESHOLD,
                        ACROSS_HOSTS_THRESHOLD)


def pipelined(size, across_hosts=False):
    return size >= pipeline_threshold(across_hosts) and size > pipeline_chunk(across_hosts)


def allreduce(exchange, before=None, after=None, from_end=False):
    """exchange.allreduce(before, after), pipelined where that pays (above).
    `from_end`: the chunks go last first, for an `after` that needs the sum
    of the buffer's last elements (syncgrad's count rides there). Collective:
    the first call on an exchange asks whether its ranks span hosts."""
    size = exchange.buffer.size
    device_wire = exchange.direct and exchange.buffer.on_device
    smallest = min(pipeline_chunk(False), pipeline_chunk(True))
    if (before or after) and size > smallest and not device_wire:
        across = exchange.spans_hosts()
        if pipelined(size, across):
            return pipelined_allreduce(exchange, before, after, from_end,
                                       pipeline_chunk(across))
    return exchange.allreduce(before, after)


def _ranges(lo, hi, step):
    for start in range(lo, hi, step):
        yield start, min(start + step, hi)


def pipelined_allreduce(exchange, before, after, from_end, chunk):
    """exchange.allreduce(before, after) in chunks of `chunk` elements:
    Iallreduce per chunk,
    PIPELINE_DEPTH of them in flight, each chunk's `before` and `after`
    running while its neighbours travel. A device buffer's chunks are staged
    through the pinned mirror by copies queued on the stream: the host
    waits for a stage-out by polling its event with MPI progress (a Test)
    in between, so the copy, the sums in flight and the kernels overlap;
    stage-ins and `after` follow in stream order, and the stream is waited
    for once at the end (rule 2 for the whole buffer)."""
    buffer, comm = exchange.buffer, exchange.comm
    wire = buffer.host          # host memory only (above): the data, or the pinned mirror
    on_host = not buffer.on_device
    chunks = list(_ranges(0, buffer.size, chunk))
    if from_end:
        chunks.reverse()
    flight = []   # (lo, hi, request), oldest first

    def progress():
        if flight:
            flight[0][2].Test()

    def work(fn, lo, hi):
        """fn over [lo, hi): in pieces with MPI progress between them on the
        host; one launch on a device (kernels run while the host waits)."""
        if fn is None:
            return
        if not on_host:
            fn(lo, hi)
            return
        for a, b in _ranges(lo, hi, PROGRESS_BLOCK):
            fn(a, b)
            progress()

    def post(lo, hi):
        work(before, lo, hi)
        if not on_host:                        # rule 1: staged out, copy complete
            staged = buffer.to_host_async(lo, hi)
            while not staged.done:
                progress()
        flight.append((lo, hi, comm.Iallreduce(MPI.IN_PLACE, wire[lo:hi], op=MPI.SUM)))

    def finish():
        lo, hi, request = flight.pop(0)
        request.Wait()
        if not on_host:
            buffer.from_host_async(lo, hi)     # rule 2: `after` follows it on the stream
        work(after, lo, hi)

    for lo, hi in chunks:
        if len(flight) == PIPELINE_DEPTH:
            finish()
        post(lo, hi)
    while flight:
        finish()
    if not on_host:
        buffer.xp.cuda.get_current_stream().synchronize()

"""The pipelined allreduce (psgd/pipeline.py): bsp, bmuf and sod with their
update running chunk by chunk under the communication must match the serial
replays at any chunk size, and at np 2, where a sum of two is the same in any
order, give exactly the bits of one blocking call."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
import reference
from device_util import load
from psgd import mpi, pipeline, settings
from psgd.buffers import FlatBuffer, host_copy

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

collective = load("algorithms/test_collective.py")

REPLAYS = {
    "bsp": (lambda ws, ns, s: reference.bsp(ws, ns, s, False), None, {}),
    "bmuf": (lambda ws, ns, s: reference.bmuf(ws, ns, s, 0.6, 1.3, True),
             lambda s: s["w_g"], {"block_momentum": 0.6, "block_lr": 1.3}),
    "sod": (lambda ws, ns, s: reference.sod(ws, ns, s, "adam", 0.05), None,
            {"outer": "adam", "outer_lr": 0.05}),
}


class Pipelined:
    """Within the block: chunks of `chunk` elements, every buffer pipelined;
    counts the Iallreduce calls so a test knows the pipeline ran."""

    def __init__(self, chunk, comm=None):
        self.chunk, self.comm, self.calls = chunk, comm, 0

    def __enter__(self):
        self.old = (settings.set("PSGD_MPI_PIPELINE_CHUNK", self.chunk),
                    settings.set("PSGD_MPI_PIPELINE_THRESHOLD", 0))
        self.original = pipeline.pipelined_allreduce

        def counting(*args, **kwargs):
            self.calls += 1
            return self.original(*args, **kwargs)
        pipeline.pipelined_allreduce = counting
        return self

    def __exit__(self, *exc):
        pipeline.pipelined_allreduce = self.original
        settings.set("PSGD_MPI_PIPELINE_CHUNK", self.old[0])
        settings.set("PSGD_MPI_PIPELINE_THRESHOLD", self.old[1])


@pytest.mark.parametrize("chunk", [1, 4, 7])
@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
def test_replays_hold_at_any_chunk_size(comm, name, chunk):
    update, final_of, options = REPLAYS[name]
    with Pipelined(chunk) as pipe:
        collective.check(comm, name, update, final_of, **options)
    assert pipe.calls > 0, "the pipeline did not run"


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
def test_pipelined_bits_equal_one_call_at_np2(comm, name):
    """At np 2 an element's sum is w_0 + w_1 whatever the message size, so
    the pipelined sync must give exactly the bits of the unpipelined one."""
    if comm.size != 2:
        pytest.skip("bit equality is guaranteed by MPI only for a sum of two")
    options = REPLAYS[name][2]
    with Pipelined(10 ** 9):   # no buffer here has more than one chunk: one call
        seen_one, _, final_one, _ = collective.run(comm, name, **options)
    with Pipelined(3) as pipe:
        seen_chunked, _, final_chunked, _ = collective.run(comm, name, **options)
    assert pipe.calls > 0
    for a, b in zip(seen_one, seen_chunked):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(final_one, final_chunked)


def _syncgrad_sum(comm, b_k):
    """syncgrad's averaged gradients after one sync of rank-dependent ones."""
    shapes = [(3, 4), (7,)]
    sync = psgd.create("syncgrad", [np.zeros(s) for s in shapes],
                       grads=[np.zeros(s) for s in shapes], comm=comm)
    for i, g in enumerate(sync.grads):
        g[...] = np.arange(g.size).reshape(g.shape) * (comm.rank + 1) + i + 0.1 * comm.rank
    assert sync.synchronize(b_k)
    out = [np.array(g) for g in sync.grads]
    sync.stop(0)
    return out


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_syncgrad_pipelined_divides_every_chunk_by_the_summed_count(comm, chunk):
    """The count rides in the wire's last two elements: pipelined, every
    chunk's unfold must see it summed, whichever chunk it is in."""
    counts = [2 + 3 * k for k in range(comm.size)]
    with Pipelined(10 ** 9):
        one_call = _syncgrad_sum(comm, counts[comm.rank])
    with Pipelined(chunk) as pipe:
        chunked = _syncgrad_sum(comm, counts[comm.rank])
    assert pipe.calls > 0, "the pipeline did not run"
    for i, (a, b) in enumerate(zip(one_call, chunked)):
        expected = sum(c * (np.arange(a.size).reshape(a.shape) * (k + 1) + i + 0.1 * k)
                       for k, c in enumerate(counts)) / sum(counts)
        np.testing.assert_allclose(b, expected, rtol=1e-12)
        if comm.size == 2:      # a sum of two is the same in any message size
            np.testing.assert_array_equal(a, b)


def test_callbacks_cover_the_buffer_once_in_order(comm):
    """before() runs on every element before MPI reads it, after() on every
    element after its sum arrived, each exactly once."""
    buf = FlatBuffer.pack([np.arange(23, dtype=np.float64)])
    ex = mpi.Exchange(comm, buf)
    covered = {"before": np.zeros(23, int), "after": np.zeros(23, int)}

    def before(lo, hi):
        covered["before"][lo:hi] += 1
        buf.data[lo:hi] *= 2

    def after(lo, hi):
        covered["after"][lo:hi] += 1
        assert (covered["before"][lo:hi] == 1).all()
        # the sum has arrived: 2 * value on each of the ranks
        np.testing.assert_array_equal(buf.data[lo:hi], 2 * comm.size * np.arange(lo, hi))
        buf.data[lo:hi] += 1

    with Pipelined(5) as pipe:
        pipeline.allreduce(ex, before=before, after=after)
    assert pipe.calls == 1
    assert (covered["before"] == 1).all() and (covered["after"] == 1).all()
    np.testing.assert_array_equal(host_copy(buf.data), 2 * comm.size * np.arange(23) + 1)


def test_small_buffers_keep_one_call(comm, setting):
    setting("PSGD_MPI_PIPELINE_CHUNK", 4)
    setting("PSGD_MPI_PIPELINE_THRESHOLD", 100)
    assert not pipeline.pipelined(23) and pipeline.pipelined(100) and not pipeline.pipelined(4)
    with pytest.raises(ValueError):
        settings.set("PSGD_MPI_PIPELINE_CHUNK", 0)


class TwoHosts(MPI.Intracomm):
    """The same communicator, its ranks reported on two hosts (even and odd
    ranks), as Split_type(COMM_TYPE_SHARED) reports a job across machines."""

    def Split_type(self, split_type, key=0, info=MPI.INFO_NULL):
        assert split_type == MPI.COMM_TYPE_SHARED
        return self.Split(self.Get_rank() % 2, key)


def _counting_sum(comm, chunk):
    """(pipelined?, spans hosts?, result) of one pipeline.allreduce of a
    23-element buffer, the threshold left to the path the bytes take."""
    buf = FlatBuffer.pack([np.arange(23, dtype=np.float64)])
    ex = mpi.Exchange(comm, buf)
    with Pipelined(chunk) as pipe:
        settings.set("PSGD_MPI_PIPELINE_THRESHOLD", None)   # by the path, as by default
        pipeline.allreduce(ex, after=lambda lo, hi: None)
    return pipe.calls == 1, ex.spans_hosts(), host_copy(buf.data)


def test_one_host_keeps_small_buffers_in_one_call(comm):
    pipelined, spans, summed = _counting_sum(comm, 5)
    assert not spans and not pipelined     # 23 elements < the one-host threshold
    np.testing.assert_array_equal(summed, comm.size * np.arange(23))


def test_across_hosts_every_buffer_of_several_chunks_is_pipelined(comm):
    two_hosts = TwoHosts(comm)
    pipelined, spans, summed = _counting_sum(two_hosts, 5)
    assert spans and pipelined
    np.testing.assert_array_equal(summed, comm.size * np.arange(23))
    pipelined, _, _ = _counting_sum(two_hosts, 23)     # one chunk: nothing to pipeline
    assert not pipelined


def test_spans_hosts_is_one_answer_on_every_rank(comm):
    answers = comm.allgather(mpi.spans_hosts(TwoHosts(comm)))
    assert answers == [comm.size > 1] * comm.size

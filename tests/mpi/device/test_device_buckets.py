"""psgd.torch's buckets (psgd/torch_buckets.py) over a device buffer, as
with a CUDA model: backward's hooks start syncgrad's buckets, compressed or
not, on psgd's transfer thread while the gradients' kernels still run on
another stream (torch's). Stand-ins play torch's parameters (the buckets use
their methods only). The simulated device runs those kernels only when their
stream, or an event recorded on it, is synchronized, and the transfer
thread has its own current device and stream, as in CUDA: a bucket that
sums before waiting for its gradients sums stale ones, and a sum run
without the buffer's device current fails. Every step's mean gradient is
bit for bit the host path's, which tests/mpi/torch/test_torch_compression.py
replays against the contract."""
import numpy as np
import pytest

import psgd
from compression_schedule import SHAPES, agree_bitwise, counts, initial, step
from psgd import mpi_async
from psgd.backend import to_numpy
from psgd.torch_buckets import Buckets

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

KINDS = ["none", "fp16", "1bit"]
BUCKET_BYTES = [0, 400, 1 << 20]    # one per tensor, two, one for the whole model


class Param:
    """What the buckets use of a torch parameter: numel(), .grad (its view
    of the flat gradient buffer) and the post-accumulate-grad hook."""

    def __init__(self, view):
        self.grad = view
        self.hook = None

    def numel(self):
        return self.grad.size

    def register_post_accumulate_grad_hook(self, hook):
        self.hook = hook
        return hook


def train(comm, xp, kind, bucket_bytes, steps=4):
    """syncgrad over Buckets, gradients written as backward would (the last
    parameter's first, each on `xp`'s side stream, then its hook); the mean
    gradient after every step, on the host."""
    k = comm.Get_rank()
    options = {} if kind == "none" else dict(compression=kind, compression_block=50)
    sync = psgd.create("syncgrad", [xp.asarray(a) for a in initial()], comm=comm,
                       grads=[xp.zeros(s, np.float32) for s in SHAPES], **options)
    views = sync.grad_buffer.views
    params = [Param(v) for v in views]
    side = None if xp is np else xp.cuda.Stream(non_blocking=True)
    buckets = Buckets(sync, ["p%d" % i for i in range(len(params))], params, views,
                      bucket_bytes, None if side is None else side.record)
    offsets = np.cumsum([0] + [int(np.prod(s)) for s in SHAPES])
    plan, seen = counts(k, comm.Get_size()), []
    for t in range(steps):
        n_k = plan[t] if t < len(plan) else 0
        if n_k:         # backward, with the count known before it (DistributedOptimizer)
            buckets.expect = lambda: n_k
            g = step(k, t) * 100
            for i in reversed(range(len(params))):
                value = g[offsets[i]:offsets[i + 1]].reshape(SHAPES[i])
                if side is None:
                    views[i][...] = value
                else:
                    with side:
                        views[i][...] = xp.asarray(value)
                params[i].hook(params[i])
            buckets.expect = None
        assert sync.synchronize(n_k)
        seen.append(to_numpy(sync.grad_buffer.data, copy=True))
    sync.stop(0)
    sync.close()
    return buckets, seen


@pytest.mark.parametrize("bucket_bytes", BUCKET_BYTES)
@pytest.mark.parametrize("kind", KINDS)
def test_device_buckets_started_from_backward_sum_as_the_host(comm, xp, kind, bucket_bytes):
    _, host = train(comm, np, kind, bucket_bytes)
    # the simulated model on its second GPU, which the transfer thread must make current
    with xp.cuda.Device(1 if xp.__name__ == "simcupy" else None):
        buckets, device = train(comm, xp, kind, bucket_bytes)
    assert len(buckets.buckets) == {0: 3, 400: 2, 1 << 20: 1}[bucket_bytes]
    agree_bitwise(comm, device)
    for t, (a, b) in enumerate(zip(device, host)):
        if xp.__name__ == "simcupy" or kind == "none":
            assert a.tobytes() == b.tobytes(), (t, np.abs(a - b).max())
        else:       # a GPU's kernels may round differently; 1bit makes a sign of it
            assert np.mean(np.abs(a - b) > 1e-3) < 0.01, (t, np.abs(a - b).max())


def test_the_buckets_leave_on_the_transfer_thread(comm, xp):
    """What the test above relies on: with MPI_THREAD_MULTIPLE (mpi4py's
    default), the hooks' buckets are summed on the thread, not in the caller."""
    assert mpi_async.threaded()

"""psgd.torch syncgrad in buckets through DistributedOptimizer: the same
parameters as a serial replay of the weighted mean (docs/algorithms.md, syncgrad)
for every bucket size, with zero_grad either way, unused parameters,
accumulation under no_sync() and ranks that run out of data; and the sums
really leave while backward still runs."""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psgd  # noqa: E402
import psgd.torch  # noqa: E402
from torch_models import LR, agreed  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

SHAPES = [(4, 3), (4,), (0,), (5, 4), (5,), (2, 5), (2,)]
BUCKETS_MB = [0, 1e-4, 25]      # one per tensor, a few, one for the whole model


def model(seed):
    torch.manual_seed(seed)
    m = torch.nn.Module()
    for i, shape in enumerate(SHAPES):
        m.register_parameter("p%d" % i, torch.nn.Parameter(torch.randn(shape)))
    return m


def goal(rank, t, i, part=0):
    rng = np.random.default_rng([rank, t, i, part])
    return rng.standard_normal(SHAPES[i]).astype(np.float32)


def count(rank, t):
    return 2 + (3 * rank + t) % 5


def backward(m, rank, t, used, part=0):
    """loss = sum over the used parameters of 0.5 |p - goal|^2."""
    loss = sum(0.5 * ((p - torch.as_tensor(goal(rank, t, i, part))) ** 2).sum()
               for i, p in enumerate(m.parameters()) if used(rank, t, i))
    loss.backward()


def replay(size, steps, used, active, parts=1):
    """Rank 0's start, then w -= LR * sum_k b_k g_k / b over the active ranks."""
    w = [p.detach().numpy().astype(np.float64) for p in model(0).parameters()]
    for t in range(steps):
        ranks = [k for k in range(size) if active(k, t)]
        b = sum(count(k, t) for k in ranks)
        for i in range(len(w)):
            g = sum(count(k, t) * sum(w[i] - goal(k, t, i, part) for part in range(parts))
                    for k in ranks if used(k, t, i))
            w[i] = w[i] - LR * g / b
    return np.concatenate([a.ravel() for a in w])


def train(comm, bucket_mb, steps, used=lambda k, t, i: True, active=lambda k, t: True,
          parts=1, set_to_none=True):
    m = model(comm.rank)
    sync = psgd.torch.create("syncgrad", m, comm=comm, bucket_mb=bucket_mb)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    for t in range(steps):
        if not active(comm.rank, t):
            break
        opt.zero_grad(set_to_none=set_to_none)
        opt.samples = count(comm.rank, t)
        for part in range(parts - 1):
            with opt.no_sync():
                backward(m, comm.rank, t, used, part)
        backward(m, comm.rank, t, used, parts - 1)
        opt.step()
    opt.stop()
    got = agreed(comm, m.parameters())
    return got, sync


@pytest.mark.parametrize("bucket_mb", BUCKETS_MB)
@pytest.mark.parametrize("set_to_none", [True, False])
def test_every_bucket_size_gives_the_weighted_mean(comm, bucket_mb, set_to_none):
    got, sync = train(comm, bucket_mb, 4, set_to_none=set_to_none)
    buckets = {0: len(SHAPES), 1e-4: 2, 25: 1}[bucket_mb]
    assert len(sync.buckets.buckets) == buckets
    np.testing.assert_allclose(got, replay(comm.size, 4, lambda k, t, i: True,
                                           lambda k, t: True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bucket_mb", BUCKETS_MB)
def test_unused_parameters_add_nothing(comm, bucket_mb):
    """Rank 1 leaves p3 out, and every rank leaves p5 out in step 1."""
    def used(k, t, i):
        return not (k == 1 and i == 3) and not (t == 1 and i == 5)
    got, _ = train(comm, bucket_mb, 3, used=used)
    np.testing.assert_allclose(got, replay(comm.size, 3, used, lambda k, t: True),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bucket_mb", [0, 25])
def test_accumulation_under_no_sync_sends_the_sum(comm, bucket_mb):
    everything = lambda k, t, i: True  # noqa: E731
    got, _ = train(comm, bucket_mb, 3, parts=3)
    np.testing.assert_allclose(got, replay(comm.size, 3, everything, lambda k, t: True,
                                           parts=3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bucket_mb", [0, 25])
def test_ranks_out_of_data_keep_stepping_with_the_others(comm, bucket_mb):
    """Rank k has 2 + k batches; stop() keeps it in step with the rest."""
    everything = lambda k, t, i: True  # noqa: E731
    active = lambda k, t: t < 2 + k  # noqa: E731
    got, _ = train(comm, bucket_mb, 1 + comm.size, active=active)
    np.testing.assert_allclose(got, replay(comm.size, 1 + comm.size, everything, active),
                               rtol=1e-5, atol=1e-5)


def test_a_bucket_is_summed_while_backward_still_runs(comm):
    """The last gradient to land waits, inside backward, for the sum of the
    first bucket: it arrives only if that bucket left before backward ended."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                            torch.nn.Tanh(), torch.nn.Linear(8, 2))
    sync = psgd.torch.create("syncgrad", m, comm=comm, bucket_mb=0)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    first = sync.buckets.buckets[0]
    assert m[4].bias in [list(m.parameters())[i] for i in first.members]
    seen = []

    def last_to_land(param):
        deadline = time.monotonic() + 20
        while not first.done() and time.monotonic() < deadline:
            time.sleep(0.001)
        seen.append(first.done())

    m[0].weight.register_post_accumulate_grad_hook(last_to_land)
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(comm.rank))
    opt.zero_grad()
    m(x).square().sum().backward()
    opt.step()
    opt.stop()
    assert seen == [True]

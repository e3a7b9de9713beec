"""psgd.torch syncgrad compressed in its buckets (docs/algorithms.md,
"Compression on the wire"): each bucket a striped, error-fed sum of its own,
bit for bit the serial replay of the contract on every rank, for every
quantizer and bucket size, with unused parameters, accumulation and ranks
out of data; the residuals kept as syncgrad's state in the gradients'
layout (checkpointed, zeroed by reset_to); compression_start; bmuf and sod
compressed through DistributedOptimizer as through the NumPy API; a bad
compression value named in one line on every rank."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psgd  # noqa: E402
import psgd.torch  # noqa: E402
from compression_replay import HostReplay, Replay  # noqa: E402
from psgd import kernels  # noqa: E402
from psgd.algorithms import by_n  # noqa: E402
from torch_models import LR, cnn, counts, flat, targets  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

KINDS = ["fp16", "bf16", "1bit"]
BUCKETS_MB = [0, 3e-5, 25]      # one per tensor (6), three, one for the whole model
BLOCK = 16                      # 1bit: several blocks per stripe


def everything(k, t, i):
    return True


class BucketReplay:
    """The contract per bucket: every rank's e_k and every owner's r_j of
    each bucket's striped sum, fed b_k * g_k (g_k as autograd leaves it);
    with `hosts` (the ranks of each host, all hosts of one size) the sum
    sliced across the hosts (HostReplay)."""

    def __init__(self, kind, P, bounds, hosts=None):
        self.bounds = bounds
        self.sums = [Replay(kind, P, hi - lo, np.float32, BLOCK) if hosts is None else
                     HostReplay(kind, hosts, hi - lo, BLOCK, sliced=True) for lo, hi in bounds]

    def mean(self, w, bs, grads):
        """G / b: G the buckets' compressed sums, b the summed count."""
        G = np.empty_like(w)
        for (lo, hi), r in zip(self.bounds, self.sums):
            for k, b_k in enumerate(bs):
                if b_k:
                    kernels.axpy(r.e[k], b_k, grads[k][lo:hi])
            G[lo:hi] = r.sum()
        G /= np.float32(max(sum(bs), 1))
        return G

    def worker_residual(self, k):
        """e_k of every bucket in the gradients' layout (buckets are cut from its end)."""
        return np.concatenate([r.e[k] for _, r in sorted(zip(self.bounds, self.sums),
                                                         key=lambda pair: pair[0])])


def backward(model, rank, t, part, used):
    """loss = sum over the used parameters of 0.5 |p - goal|^2."""
    goal = targets(model, rank, 10 * t + part)
    loss = sum(0.5 * ((p - torch.as_tensor(g)) ** 2).sum()
               for i, (p, g) in enumerate(zip(model.parameters(), goal)) if used(rank, t, i))
    loss.backward()


def gradient(model, w, rank, t, used, parts):
    """What backward leaves in .grad: the sum over parts of w - goal (0
    where unused), accumulated in torch's order."""
    g = [np.zeros(p.shape, np.float32) for p in model.parameters()]
    for part in range(parts):
        goal = targets(model, rank, 10 * t + part)
        for i, (gi, gl) in enumerate(zip(g, goal)):
            if used(rank, t, i):
                gi += np.subtract(w[i], gl)
    return np.concatenate([a.ravel() for a in g])


def train(comm, kind, bucket_mb, steps, used=everything, active=lambda k, t: True,
          parts=1, hosts=None):
    """DistributedOptimizer over syncgrad with `kind`; after every step its
    gradients (the mean) and the replay's, on every rank alike. `hosts`:
    the replay's, where the sum is sliced across faked hosts."""
    P, rank = comm.size, comm.rank
    model = cnn(seed=rank)
    sync = psgd.torch.create("syncgrad", model, comm=comm, bucket_mb=bucket_mb,
                             compression=kind, compression_block=BLOCK)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
    n = sum(p.numel() for p in model.parameters())
    replay = BucketReplay(kind, P, [(b.lo, min(b.hi, n)) for b in sync.buckets.buckets],
                          hosts)
    out = []
    for t in range(steps):
        w = [p.detach().numpy().copy() for p in model.parameters()]
        bs = [counts(k, t) if active(k, t) else 0 for k in range(P)]
        if bs[rank]:
            opt.zero_grad()
            opt.samples = bs[rank]
            for part in range(parts - 1):
                with opt.no_sync():
                    backward(model, rank, t, part, used)
            backward(model, rank, t, parts - 1, used)
            opt.step()
        else:       # out of data: what opt.stop() does in each of its rounds
            assert sync.synchronize(0)
            opt.local_step()
        got = flat(p.grad for p in model.parameters())
        expected = replay.mean(np.concatenate([a.ravel() for a in w]), bs,
                               [gradient(model, w, k, t, used, parts) for k in range(P)])
        out.append((got.tobytes() == expected.tobytes(), t))
    residual = sync.state_dict()["residual_worker"]
    out.append((residual.tobytes() == replay.worker_residual(rank).tobytes(), "residual"))
    everyone = comm.allgather(out)
    assert everyone == [[(True, t) for _, t in out]] * P, everyone
    return sync


@pytest.mark.parametrize("bucket_mb", BUCKETS_MB)
@pytest.mark.parametrize("kind", KINDS)
def test_every_bucket_is_the_replayed_compressed_sum(comm, kind, bucket_mb):
    sync = train(comm, kind, bucket_mb, 4)
    assert len(sync.buckets.buckets) == {0: 6, 3e-5: 3, 25: 1}[bucket_mb]
    assert sync.algorithm.compressed.parts.keys() == {b.lo for b in sync.buckets.buckets}
    sync.stop(0)


@pytest.mark.parametrize("bucket_mb", [0, 3e-5])
def test_buckets_sliced_across_hosts_replay_the_contract(comm, monkeypatch, bucket_mb):
    """Hosts faked as rank pairs over the first even number of ranks (2 x 2
    at np 5, one host of 2 below): every bucket is a sliced sum of its own
    on the same host split (two_level.SlicedSum.like)."""
    from mpi4py import MPI
    from psgd import hierarchy, settings
    from psgd.algorithms import two_level
    rank, even = comm.rank, comm.size - comm.size % 2
    part = comm.Split(0 if rank < even else MPI.UNDEFINED, rank)
    if part == MPI.COMM_NULL:
        return
    real = hierarchy.create
    monkeypatch.setattr(hierarchy, "create", lambda c, host=None: real(c, c.Get_rank() // 2))
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", "on")
    try:
        pairs = [[k, k + 1] for k in range(0, even, 2)]
        sync = train(part, "1bit", bucket_mb, 3, hosts=pairs)
        parts = sync.algorithm.compressed.parts
        assert len(parts) == len(sync.buckets.buckets) > 1
        assert all(type(p) is two_level.SlicedSum for p in parts.values())
        sync.stop(0)
        sync.close()
    finally:
        settings.set("PSGD_COMPRESSION_HIERARCHY", old)
        part.Free()


@pytest.mark.parametrize("bucket_mb", [0, 25])
def test_unused_parameters_accumulation_and_ranks_out_of_data(comm, bucket_mb):
    """Rank 1 leaves the BatchNorm weight out, every rank the last bias in
    step 1; three backward passes per step; the last rank runs out of data
    after 2 steps and sums with b_k = 0 (its residual still goes out)."""
    last = comm.size - 1

    def used(k, t, i):
        return not (k == 1 and i == 2) and not (t == 1 and i == 5)
    sync = train(comm, "1bit", bucket_mb, 4, used=used, parts=3,
                 active=lambda k, t: k != last or t < 2)
    sync.stop(0)


@pytest.mark.parametrize("bad,named", [("2bit", "compression"), ("4bit", "compression"),
                                       (0, "compression_block")])
def test_a_bad_compression_value_is_one_line_on_every_rank(comm, bad, named):
    """One rank's bad value (the last rank's, or every rank's) stops them all."""
    options = {"compression": "1bit"}
    if named == "compression_block":
        options["compression_block"] = bad
    elif bad == "2bit" or comm.rank == comm.size - 1:
        options["compression"] = bad
    model = cnn(seed=comm.rank)
    before = flat(model.parameters())
    with pytest.raises(psgd.UsageError) as caught:
        psgd.torch.create("syncgrad", model, comm=comm, **options)
    text = str(caught.value)
    assert "\n" not in text and named in text and str(bad) in text, text
    np.testing.assert_array_equal(flat(model.parameters()), before)


def test_compression_start_steps_go_plain(comm):
    """compression_start=2: the first two steps' means are the plain ones."""
    def means(**options):
        model = cnn(seed=comm.rank)
        sync = psgd.torch.create("syncgrad", model, comm=comm, bucket_mb=0, **options)
        opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
        seen = []
        for t in range(3):
            opt.zero_grad()
            backward(model, comm.rank, t, 0, everything)
            opt.step()
            seen.append(flat(p.grad for p in model.parameters()).tobytes())
        opt.stop()
        return seen
    plain, warm = means(), means(compression="1bit", compression_start=2)
    assert warm[:2] == plain[:2] and warm[2] != plain[2]


@pytest.mark.parametrize("name,options", [("bmuf", {}), ("sod", {"outer": "sgd",
                                                                 "outer_lr": 0.6})])
def test_block_algorithms_compress_through_the_optimizer_as_through_numpy(comm, name, options):
    """bmuf and sod compress psgd.torch's flat buffer with its options (the
    trainer's by N under those given; with 1bit the momentum shares):
    DistributedOptimizer (a sync every 2 steps) leaves the model the NumPy
    API leaves with the same options, driven by the same torch steps."""
    options = dict(options, compression="1bit", compression_block=BLOCK)
    rank = comm.rank
    model = cnn(seed=rank)
    sync = psgd.torch.create(name, model, comm=comm, **options)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync,
                                          every=2)
    ref = psgd.create(name, [p.detach().numpy().copy() for p in cnn(seed=rank).parameters()],
                      comm=comm, **by_n.given_over(name, comm.size, options))
    tensors = [torch.from_numpy(a).requires_grad_() for a in ref.params]
    ref_opt, since = torch.optim.SGD(tensors, lr=LR), 0
    for t in range(6):
        goal = targets(model, rank, t)
        opt.samples = counts(rank, t)
        opt.zero_grad()
        sum(0.5 * ((p - torch.as_tensor(g)) ** 2).sum()
            for p, g in zip(model.parameters(), goal)).backward()
        opt.step()
        ref_opt.zero_grad()
        sum(0.5 * ((p - torch.as_tensor(g)) ** 2).sum() for p, g in zip(tensors, goal)).backward()
        ref_opt.step()
        since += counts(rank, t)
        if t % 2 == 1:
            assert ref.synchronize(since)
            since = 0
    opt.stop()
    ref.stop(0)
    assert "residual_worker" in sync.state_dict()
    same = flat(model.parameters()).tobytes() == flat(tensors).tobytes()
    assert comm.allgather(same) == [True] * comm.size
    ref.close()


def test_bucket_residuals_checkpoint_and_reset(comm):
    """The buckets' residuals load back into the same layout; a model
    loaded through sync.load_state_dict (reset_to) zeroes every bucket's."""
    sync = train(comm, "1bit", 0, 2)
    state = sync.state_dict()
    assert state["residual_worker"].any() and len(sync.algorithm.compressed.parts) == 6
    again = psgd.torch.create("syncgrad", cnn(seed=comm.rank), comm=comm, bucket_mb=0,
                              compression="1bit", compression_block=BLOCK)
    again.algorithm.load_state_dict(state)
    assert all(again.state_dict()[k].tobytes() == v.tobytes() for k, v in state.items())
    again.load_state_dict(again.model.state_dict() if comm.rank == 0 else None)
    assert not any(v.any() for v in again.state_dict().values())
    for s in (sync, again):
        s.stop(0)


@pytest.mark.parametrize("bucket_mb", [0, 25])
def test_fp16_overflow_in_a_bucket_names_the_step_on_every_rank(comm, bucket_mb):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("syncgrad", model, comm=comm, bucket_mb=bucket_mb,
                             compression="fp16")
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
    for t in range(3):
        opt.zero_grad()
        if t == 2 and comm.rank == comm.size - 1:      # a gradient of 1e6 in bucket 0
            (model[-1].bias * 1e6).sum().backward()
        else:
            backward(model, comm.rank, t, 0, everything)
        if t < 2:
            opt.step()
    with pytest.raises(psgd.UsageError, match=r"^compression=fp16: sync 3 has a value "
                                              r"beyond fp16's range"):
        opt.step()
    sync.close()


@pytest.mark.parametrize("bucket_mb", [0, 25])
def test_local_steps_sum_each_ranks_own_adam(comm, bucket_mb):
    """compression_momentum=local: each rank's Adam steps on its own
    gradient, each bucket sums b_k * (its step), the mean is added: bit for
    bit a replay with one torch Adam per rank, whichever zero_grad ran; the
    last rank runs out of data after 2 steps (it steps nothing and applies
    the others' mean)."""
    P, rank, last = comm.size, comm.rank, comm.size - 1
    model = cnn(seed=rank)
    sync = psgd.torch.create("syncgrad", model, comm=comm, bucket_mb=bucket_mb, compression="1bit",
                             compression_block=BLOCK, compression_momentum="local")
    opt = psgd.torch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), sync)
    n = sum(p.numel() for p in model.parameters())
    replay = BucketReplay("1bit", P, [(b.lo, min(b.hi, n)) for b in sync.buckets.buckets])
    shadows = [cnn(seed=0) for _ in range(P)]
    adams = [torch.optim.Adam(s.parameters(), lr=0.01) for s in shadows]
    w = flat(model.parameters())
    out = []
    for t in range(4):
        bs = [counts(k, t) if k != last or t < 2 else 0 for k in range(P)]
        if bs[rank]:
            if t % 2:
                model.zero_grad()   # set_to_none: torch's own .grad, not the flat buffer's
            else:
                opt.zero_grad()
            opt.samples = bs[rank]
            backward(model, rank, t, 0, everything)
            opt.step()
        else:
            assert sync.synchronize(0, optimizer=opt)
        steps = [np.zeros_like(w) for _ in range(P)]
        for k in (k for k in range(P) if bs[k]):
            start = _unflat(shadows[k], w)
            g = gradient(shadows[k], start, k, t, everything, 1)
            for p, (lo, hi) in zip(shadows[k].parameters(), _spans(shadows[k])):
                p.grad = torch.as_tensor(g[lo:hi]).view(p.shape).clone()
            adams[k].step()
            steps[k] = np.subtract(flat(shadows[k].parameters()), w)
        w = w + replay.mean(w, bs, steps)
        out.append(flat(model.parameters()).tobytes() == w.tobytes())
    assert comm.allgather(out) == [[True] * 4] * P
    sync.stop(0, optimizer=opt)


def _spans(model):
    lo = 0
    for p in model.parameters():
        yield lo, lo + p.numel()
        lo += p.numel()


def _unflat(model, w):
    """Set `model`'s parameters to the flat `w`; returns them as arrays."""
    arrays = [w[lo:hi].reshape(p.shape) for p, (lo, hi) in zip(model.parameters(), _spans(model))]
    with torch.no_grad():
        for p, a in zip(model.parameters(), arrays):
            p.copy_(torch.as_tensor(a))
    return arrays


def test_local_steps_need_the_optimizer_in_synchronize(comm):
    sync = psgd.torch.create("syncgrad", cnn(seed=0), comm=comm, compression="fp16",
                             compression_momentum="local")
    with pytest.raises(psgd.UsageError, match="call synchronize\\(n_k, optimizer=opt\\)"):
        sync.synchronize(1)
    sync.stop(0)

"""psgd.torch.DistributedOptimizer around the model-averaging algorithms
(a sync every `every` steps, as the user's own loop would call it) and its
errors: raised before any collective, on the rank that made them, or on
every rank for create()'s bucket_mb."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psgd  # noqa: E402
import psgd.torch  # noqa: E402
from torch_models import LR, backward_toward, cnn, flat, targets  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def run(comm, wrapped, steps=6, every=3):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("bmuf", model, comm=comm)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    if wrapped:
        opt = psgd.torch.DistributedOptimizer(opt, sync, samples=2, every=every)
    n = 0
    for t in range(steps):
        opt.zero_grad()
        backward_toward(model, targets(model, comm.rank, t))
        opt.step()
        n += 2
        if not wrapped and (t + 1) % every == 0:
            sync.synchronize(n, optimizer=opt)
            n = 0
    if wrapped:
        opt.stop()
    else:
        sync.stop(n, optimizer=opt)
    return flat(model.parameters()), opt


@pytest.mark.parametrize("steps", [6, 7])     # 7: a partial block folded in by stop()
def test_block_algorithms_sync_every_k_steps_as_a_hand_written_loop(comm, steps):
    got, opt = run(comm, True, steps)
    expected, _ = run(comm, False, steps)
    np.testing.assert_array_equal(got, expected)
    assert isinstance(opt, torch.optim.SGD) and "Distributed" in type(opt).__name__
    assert opt.state_dict()["param_groups"][0]["lr"] == LR


@pytest.mark.parametrize("name, given", [
    ("bmuf", {}), ("bmuf", {"reset_local_state": True, "block_momentum": 0.2}),
    ("bmuf", {"compression": "1bit"}), ("sod", {}), ("sod", {"outer_lr": 0.1}),
    ("easgd", {}), ("asgd", {}), ("masgd", {}), ("bsp", {})])
def test_options_not_given_and_the_block_are_the_trainers_by_n(comm, name, given):
    """What a user who names only the algorithm gets: the trainer's options
    for N workers (bmuf keeps Adam's state, sod's outer rate by N, ...) and
    its block (sod 16 steps); an option given wins."""
    from psgd.algorithms import by_n
    model = cnn(seed=0)
    sync = psgd.torch.create(name, model, comm=comm, **given)
    trainer = {**by_n.options(name, sync.N, given), **given}
    assert {k: sync.options[k] for k in trainer} == trainer
    if name == "bmuf":
        assert sync.options["reset_local_state"] == given.get("reset_local_state", False)
    if sync.role == "server":
        sync.run()
        return
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
    assert opt.every == by_n.block_steps(name, sync.N) == (16 if name == "sod" else 32 if (
        name == "masgd" and sync.N < by_n.MASGD_MEAN_FROM) else 4)
    opt.stop()


def test_syncgrad_keeps_its_own_sum_under_1bit(comm):
    """The trainer's 1bit syncgrad sums each rank's steps at its own rate;
    psgd.torch sums the gradients unless compression_momentum=local is given."""
    sync = psgd.torch.create("syncgrad", cnn(seed=0), comm=comm, compression="1bit")
    assert sync.options["compression_momentum"] == "global" and not sync.sums_steps
    sync.stop()


@pytest.mark.parametrize("kwargs, message", [
    ({"samples": 0}, "samples must be a whole number >= 1"),
    ({"every": 1.5}, "every must be a whole number >= 1"),
])
def test_bad_arguments_are_refused(comm, kwargs, message):
    model = cnn(seed=0)
    sync = psgd.torch.create("bmuf", model, comm=comm)
    with pytest.raises(psgd.UsageError, match=message):
        psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync,
                                        **kwargs)
    sync.stop(0)


def test_syncgrad_refuses_every_and_foreign_tensors(comm):
    model = cnn(seed=0)
    sync = psgd.torch.create("syncgrad", model, comm=comm)
    with pytest.raises(psgd.UsageError, match="syncgrad averages every step"):
        psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync,
                                        every=4)
    other = torch.nn.Linear(2, 2)
    with pytest.raises(psgd.UsageError, match="not parameters of the model"):
        psgd.torch.DistributedOptimizer(torch.optim.SGD(other.parameters(), lr=LR), sync)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
    with pytest.raises(psgd.UsageError, match="already a psgd DistributedOptimizer"):
        psgd.torch.DistributedOptimizer(opt, sync)
    opt.stop()


def test_the_server_rank_is_told_to_run(comm):
    model = cnn(seed=0)
    sync = psgd.torch.create("easgd", model, comm=comm)
    if sync.role == "server":
        with pytest.raises(psgd.UsageError, match="serves: call sync.run"):
            psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
        sync.run()
    else:
        psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync).stop()


@pytest.mark.parametrize("bucket_mb, message", [
    (-1, "bucket_mb must be a number >= 0"), (float("nan"), "bucket_mb must be a number"),
    ("25", "bucket_mb must be a number")])
def test_a_bad_bucket_size_fails_on_every_rank(comm, bucket_mb, message):
    with pytest.raises(psgd.UsageError, match=message):
        psgd.torch.create("syncgrad", cnn(seed=0), comm=comm,
                          bucket_mb=bucket_mb if comm.rank == 0 else 25)


def test_bucket_sizes_that_differ_fail_on_every_rank(comm):
    with pytest.raises(psgd.UsageError, match="bucket_mb"):
        psgd.torch.create("syncgrad", cnn(seed=0), comm=comm, bucket_mb=1 + comm.rank)


def test_bucket_mb_is_for_syncgrad_only(comm):
    with pytest.raises(psgd.UsageError, match="only syncgrad"):
        psgd.torch.create("bmuf", cnn(seed=0), comm=comm, bucket_mb=1)


@pytest.mark.parametrize("factors", [False, True])
def test_synchronize_then_clip_clips_the_mean_gradient(comm, factors):
    """Horovod's loop: backward, synchronize(), clip_grad_norm_, step(). The
    clip sees the weighted mean of every rank's gradient (each layer's,
    whether summed plainly or through its rows): a replay on one process."""
    def model():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, 2))

    def batch(k, t):
        g = torch.Generator().manual_seed(100 * k + t)
        return torch.randn(3 + k, 64, generator=g), torch.randn(3 + k, 2, generator=g)

    def loss(m, k, t):
        x, y = batch(k, t)
        return ((m(x) - y) ** 2).mean()             # each rank's mean, weighed by b_k = rows

    m = model()
    sync = psgd.torch.create("syncgrad", m, comm=comm, factors=factors)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    for t in range(4):
        opt.zero_grad()
        opt.samples = 3 + comm.rank
        loss(m, comm.rank, t).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
    opt.stop()
    want = model()
    for t in range(4):
        grads = []
        for k in range(comm.size):
            want.zero_grad()
            loss(want, k, t).backward()
            grads.append([p.grad.clone() for p in want.parameters()])
        b = sum(3 + k for k in range(comm.size))
        for i, p in enumerate(want.parameters()):
            p.grad = sum((3 + k) * g[i] for k, g in enumerate(grads)) / b
        torch.nn.utils.clip_grad_norm_(want.parameters(), 0.5)
        with torch.no_grad():
            for p in want.parameters():
                p -= LR * p.grad
    np.testing.assert_allclose(flat(m.parameters()), flat(want.parameters()), rtol=1e-4,
                               atol=1e-6)
    if factors:
        assert [b.products for b in sync.buckets.factor_buckets if 0 in b.members] == [3]


def test_synchronize_twice_or_outside_syncgrad_is_one_line(comm):
    m = cnn(seed=0)
    sync = psgd.torch.create("syncgrad", m, comm=comm)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    opt.zero_grad()
    backward_toward(m, targets(m, comm.rank, 0))
    opt.synchronize()
    with pytest.raises(psgd.UsageError, match=r"synchronize\(\) twice"):
        opt.synchronize()
    with opt.skip_synchronize():
        opt.step()
    opt.stop()
    model = cnn(seed=0)
    block = psgd.torch.create("bmuf", model, comm=comm)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), block)
    with pytest.raises(psgd.UsageError, match="only syncgrad sums gradients before the step"):
        opt.synchronize()
    opt.stop()

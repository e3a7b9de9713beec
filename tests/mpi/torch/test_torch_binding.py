"""psgd.torch's binding of a module to the flat buffer: rank 0's model on
every rank, no copies (views, state_dict), BatchNorm buffers averaged when
asked, syncgrad's .grad, bmuf's optimizer reset, and the errors for models
that cannot be bound - raised on every rank, so no rank is left waiting."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psgd  # noqa: E402
import psgd.torch  # noqa: E402
from torch_models import cnn, flat, targets  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def gathered(comm, x):
    out = np.empty((comm.size, x.size), dtype=x.dtype)
    comm.Allgather(np.ascontiguousarray(x), out)
    return out


def test_rank0_initial_model_reaches_every_rank(comm):
    model = cnn(seed=comm.rank)
    rank0 = flat(cnn(seed=0).parameters())
    psgd.torch.create("bsp", model, comm=comm)
    np.testing.assert_array_equal(flat(model.parameters()), rank0)


def test_parameters_are_views_of_the_flat_buffer(comm):
    model = cnn(seed=comm.rank)
    first = next(model.parameters())
    sync = psgd.torch.create("bmuf", model, comm=comm)
    sync.buffer.data[:] = 7.0          # what MPI writes, torch sees
    assert all(bool((p == 7.0).all()) for p in model.parameters())
    with torch.no_grad():
        first.add_(1.0)                # what torch writes, MPI sends
    assert (sync.params[0] == 8.0).all()
    assert next(model.parameters()) is first


def test_state_dict_round_trips_through_the_flat_buffer(comm):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("bsp", model, comm=comm, buffers=True)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    sync.buffer.data[:] = -1.0
    sync.stat_buffer.data[:] = -2.0
    model.load_state_dict(saved)       # copies into the views, in place
    np.testing.assert_array_equal(sync.buffer.data, flat(saved[k] for k, _ in
                                                         model.named_parameters()))
    assert model.state_dict()["1.running_var"].data_ptr() == sync.stat_buffer.views[1].ctypes.data
    np.testing.assert_array_equal(model.state_dict()["1.running_var"].numpy(),
                                  saved["1.running_var"].numpy())
    sync.synchronize(1)                # the binding survived: no error, same model everywhere
    rows = gathered(comm, flat(model.parameters()))
    assert (rows == rows[0]).all()


@pytest.mark.parametrize("buffers", [True, False])
def test_batchnorm_buffers_averaged_when_asked(comm, buffers):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("bsp", model, comm=comm, buffers=buffers)
    bn = model[1]
    with torch.no_grad():
        bn.running_mean.fill_(float(comm.rank))
    n = [k + 1 for k in range(comm.size)]
    sync.synchronize(n[comm.rank])
    mean = sum(k * n_k for k, n_k in enumerate(n)) / sum(n)
    expected = mean if buffers else float(comm.rank)
    np.testing.assert_allclose(bn.running_mean.numpy(), expected, rtol=1e-6)
    assert bn.num_batches_tracked.dtype == torch.int64   # not float: left alone


def test_syncgrad_allocates_missing_grads(comm):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("syncgrad", model, comm=comm)
    for p in model.parameters():
        p.grad = None
    next(model.parameters()).grad = torch.full_like(next(model.parameters()), comm.rank)
    sync.synchronize(1)
    first, *rest = list(model.parameters())
    np.testing.assert_allclose(first.grad.numpy(), np.mean(range(comm.size)), rtol=1e-6)
    assert all(p.grad is not None and not p.grad.any() for p in rest)
    assert first.grad.data_ptr() == sync.grad_buffer.data.ctypes.data
    sync.stop()     # else the exit stops it, with a warning on every rank


@pytest.mark.parametrize("name,options,reset", [
    ("bmuf", {"reset_local_state": True}, True), ("bmuf", {}, False), ("bsp", {}, False)])
def test_bmuf_resets_the_torch_optimizer_state_when_asked(comm, name, options, reset):
    """Kaldi's reset, the contract's default, is psgd.torch's when given: by
    default psgd.torch keeps the state, as the trainer (algorithms/by_n.py)."""
    model = cnn(seed=comm.rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sync = psgd.torch.create(name, model, comm=comm, **options)
    sum(p.sum() for p in model.parameters()).backward()
    opt.step()
    assert len(opt.state) > 0
    sync.synchronize(1, optimizer=opt)
    assert (len(opt.state) == 0) == reset
    sync.stop(0, optimizer=opt)


def local_step(model, rank, t):
    with torch.no_grad():
        for p, goal in zip(model.parameters(), targets(model, rank, t)):
            p.add_(0.5 * (torch.as_tensor(goal) - p))


@pytest.mark.parametrize("name", ["bmuf", "sod"])
def test_load_state_dict_restarts_the_algorithm_from_rank0s_state(comm, name):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create(name, model, comm=comm, buffers=True)
    for t in range(3):                  # momentum and w_g away from their start
        local_step(model, comm.rank, t)
        sync.synchronize(1)
    saved = cnn(seed=99).state_dict() if comm.rank == 0 else None
    sync.load_state_dict(saved)
    fresh_model = cnn(seed=99)          # what a fresh create from that model does
    fresh = psgd.torch.create(name, fresh_model, comm=comm, buffers=True)
    np.testing.assert_array_equal(flat(model.parameters()), flat(fresh_model.parameters()))
    np.testing.assert_array_equal(sync.stat_buffer.data, fresh.stat_buffer.data)
    for t in range(3, 5):
        for m, s in ((model, sync), (fresh_model, fresh)):
            local_step(m, comm.rank, t)
            s.synchronize(1)
    np.testing.assert_array_equal(flat(model.parameters()), flat(fresh_model.parameters()))
    with sync, fresh:
        pass
    assert sync.algorithm.comm is None and fresh.algorithm.comm is None


def test_a_bad_state_dict_on_rank0_is_an_error_on_every_rank(comm):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("bsp", model, comm=comm)
    before = flat(model.parameters())
    bad = {"0.weight": torch.zeros(1)} if comm.rank == 0 else None
    with pytest.raises(psgd.errors.UsageError, match="rank 0: load_state_dict: "):
        sync.load_state_dict(bad)
    np.testing.assert_array_equal(flat(model.parameters()), before)
    sync.close()


def test_server_rank0_model_is_the_center(comm):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("easgd", model, comm=comm)
    assert sync.role == ("server" if comm.rank == 0 else "worker")
    if sync.role == "server":
        sync.run()
    else:
        sync.stop(0)
    np.testing.assert_array_equal(flat(model.parameters()), flat(cnn(seed=0).parameters()))


# errors ----------------------------------------------------------------------
def odd_model(kind):
    model = cnn(seed=0)
    if kind == "int":
        model.register_parameter("steps", torch.nn.Parameter(
            torch.zeros(2, dtype=torch.int64), requires_grad=False))
    elif kind == "mixed":
        model[4].double()
    elif kind == "devices":
        model[4].to("meta")
    elif kind == "half":
        model.half()
    return model


@pytest.mark.parametrize("kind,message", [
    ("int", "parameter 'steps' is int64"),
    ("mixed", "mix float32 and float64"),
    ("devices", "several devices"),
    ("half", "float16"),
])
def test_unbindable_model_fails_on_every_rank(comm, kind, message):
    """Only the last rank's model is bad; every rank raises, none changes."""
    bad = comm.rank == comm.size - 1
    model = odd_model(kind) if bad else cnn(seed=0)
    before = flat(model.parameters()) if not bad else None
    with pytest.raises(psgd.UsageError, match=message):
        psgd.torch.create("bsp", model, comm=comm)
    if not bad:
        np.testing.assert_array_equal(flat(model.parameters()), before)
        assert next(model.parameters()).grad is None


def test_buffers_with_a_server_algorithm_is_an_error(comm):
    with pytest.raises(psgd.UsageError, match="easgd does not average buffers"):
        psgd.torch.create("easgd", cnn(seed=0), comm=comm, buffers=True)


@pytest.mark.parametrize("change", ["double", "data", "new_layer"])
def test_parameters_replaced_after_create(comm, change):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("bsp", model, comm=comm)
    if change == "double":
        model.double()
    elif change == "data":
        model[0].weight.data = model[0].weight.data.clone()
    else:
        model[4] = torch.nn.Linear(36, 4)
    with pytest.raises(psgd.UsageError, match="replaced after psgd.torch.create"):
        sync.synchronize(1)
    sync.algorithm.stop(0)

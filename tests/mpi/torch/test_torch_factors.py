"""psgd.torch syncgrad with a Linear layer's gradients summed through its
factors (psgd/torch_factors.py): the same model as the plain sums of every
layer (which test_torch_buckets.py replays against the weighted mean) on
uneven counts, batches that outgrow the slot, accumulation, inputs with a
time axis and ranks out of data; the factors really carry the sums (a count
of the products formed), a gradient the rows cannot give is caught, and the
gather leaves while backward still runs."""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psgd  # noqa: E402
import psgd.torch  # noqa: E402
from psgd.errors import UsageError  # noqa: E402
from torch_models import LR, agreed  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

FAN_IN, HIDDEN, OUT = 128, 128, 3     # worth it while ranks x rows < 128


def mlp(seed, bias=True, layers=2):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(FAN_IN, HIDDEN, bias=bias), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, OUT))[:2 * layers - 1]


def counts(rank, t):
    """Uneven rows by rank and step, each rank's most in its first step (so
    the slot learned there fits the rest)."""
    return 6 - (3 * rank + t) % 5


def batch(rank, t, rows, time_axis=0, part=0, out=OUT):
    g = torch.Generator().manual_seed(10000 * rank + 100 * t + part)
    shape = (rows, time_axis) if time_axis else (rows,)
    return torch.randn(*shape, FAN_IN, generator=g), torch.randn(*shape, out, generator=g)


def train(comm, factors, steps=5, rows=counts, active=lambda k, t: True, parts=1,
          time_axis=0, extra=None, bias=True, evaluate=False, zero=None, **options):
    """SGD on a squared error, rows(rank, t) samples a step; returns the
    parameters (the same on every rank) and the first layer's bucket."""
    m = mlp(comm.rank, bias)
    sync = psgd.torch.create("syncgrad", m, comm=comm, factors=factors, **options)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    for t in range(steps):
        if not active(comm.rank, t):
            break
        if zero is None:
            opt.zero_grad()
        else:       # the model's own: .grad dropped, or zeroed where it is
            m.zero_grad(set_to_none=zero)
        opt.samples = rows(comm.rank, t)
        for part in range(parts):
            x, y = batch(comm.rank, t, rows(comm.rank, t), time_axis, part)
            loss = 0.5 * ((m(x) - y) ** 2).mean()
            if extra is not None:
                loss = loss + extra(m)
            if part < parts - 1:
                with opt.no_sync():
                    loss.backward()
            else:
                loss.backward()
        if evaluate:
            with torch.no_grad():
                m(batch(comm.rank, t, 7)[0])
        opt.step()
    opt.stop()
    got = agreed(comm, m.parameters())
    first = [b for b in sync.buckets.factor_buckets if 0 in b.members]
    return got, (first[0] if first else None)


def same_as_plain(comm, steps=5, rtol=1e-5, atol=1e-6, plainly=None, **kw):
    """The factors' model against the plain sums' (of `plainly`'s options)."""
    got, bucket = train(comm, True, steps, **kw)
    plain, none = train(comm, False, steps, **dict(kw, **(plainly or {})))
    assert none is None
    np.testing.assert_allclose(got, plain, rtol=rtol, atol=atol)
    return bucket


@pytest.mark.parametrize("bias", [True, False])
def test_the_factors_give_the_plain_sums_weighted_by_uneven_counts(comm, bias):
    bucket = same_as_plain(comm, bias=bias)
    assert bucket.members == ([0, 1] if bias else [0])      # the bias rides with its weight
    assert not bucket.plain and bucket.checked
    assert bucket.capacity == 6
    assert bucket.products == 4     # the first step learns the slot's rows


@pytest.mark.parametrize("set_to_none", [True, False])
def test_the_models_own_zero_grad_too(comm, set_to_none):
    """model.zero_grad(): torch's new tensors, or the buffer's views zeroed
    in place (then backward writes into the buffer, and the gather waits
    for the layer's gradients to land before the product is formed there)."""
    bucket = same_as_plain(comm, zero=set_to_none)
    assert bucket.products == 4 and not bucket.plain


def deep(seed):
    """Two layers worth their rows, the second's bucket not the last."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(FAN_IN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, OUT))


def test_backward_never_writes_under_the_product(comm):
    """With .grad the buffer's view (the model's own in-place zero_grad),
    the middle layer's gather must not leave before its gradient lands
    there: a hook between the two (its rows in, its own backward not yet
    run) waits for the gather, which must not come."""
    def run(factors):
        m = deep(comm.rank)
        sync = psgd.torch.create("syncgrad", m, comm=comm, factors=factors)
        opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
        middle = [b for b in sync.buckets.factor_buckets if 2 in b.members]
        for t in range(4):
            m.zero_grad(set_to_none=False)
            x, y = batch(comm.rank, t, counts(comm.rank, 0))
            opt.samples = len(x)
            hidden = m[2](m[1](m[0](x)))
            if t == 3 and middle:
                def hold(grad, bucket=middle[0]):
                    deadline = time.monotonic() + 0.5
                    while not bucket.done() and time.monotonic() < deadline:
                        time.sleep(0.001)
                hidden.register_hook(hold)
            (0.5 * ((m[4](m[3](hidden)) - y) ** 2).mean()).backward()
            opt.step()
        opt.stop()
        return np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    np.testing.assert_allclose(run(True), run(False), rtol=1e-5, atol=1e-6)


def test_rows_beyond_the_slot_are_summed_plainly_once_then_fit(comm):
    def rows(k, t):
        return 9 if (k, t) == (1, 2) else counts(k, t)
    bucket = same_as_plain(comm, steps=6, rows=rows)
    assert bucket.capacity == 9
    assert bucket.products == 4     # steps 0 (learning) and 2 (one rank's 9 rows) plainly


def test_a_layer_whose_rows_outgrow_the_saving_is_summed_plainly_for_good(comm):
    """70 rows on one rank: gathering every rank's would move more than the
    plain sum of the 128 x 128 weight (ranks x rows >= 128)."""
    def rows(k, t):
        return 70 if (k, t) == (1, 2) else counts(k, t)
    bucket = same_as_plain(comm, steps=5, rows=rows)
    assert bucket.plain and bucket.capacity == 70 and bucket.products == 1


def test_accumulation_under_no_sync_sends_every_pass_rows(comm):
    bucket = same_as_plain(comm, parts=3)
    assert bucket.products == 4 and bucket.capacity == 18


def test_a_time_axis_is_rows_too(comm):
    bucket = same_as_plain(comm, rows=lambda k, t: 2, time_axis=3)
    assert bucket.capacity == 6 and bucket.products == 4


def test_ranks_out_of_data_keep_stepping_with_the_others(comm):
    """Rank k has 2 + k batches; stop() keeps it in step with the rest."""
    bucket = same_as_plain(comm, steps=1 + comm.size, active=lambda k, t: t < 2 + k)
    assert bucket.products == comm.size    # every step with rows but the first


def test_an_evaluation_forward_adds_no_rows(comm):
    bucket = same_as_plain(comm, evaluate=True)
    assert bucket.products == 4


def test_a_weight_used_outside_its_layer_is_summed_plainly_for_good(comm):
    """The rows cannot give the weight decay's part: the check on the first
    step that fits finds it, and the layer goes back to plain sums."""
    bucket = same_as_plain(comm, extra=lambda m: 0.01 * (m[0].weight ** 2).sum())
    assert bucket.plain and bucket.products == 0


class Functional(torch.nn.Module):
    """A Linear layer whose weight is used without its forward (as
    MultiheadAttention uses its out_proj): no rows, yet a gradient."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = torch.nn.Linear(FAN_IN, OUT)
        self.wide = torch.nn.Linear(FAN_IN, FAN_IN)

    def forward(self, x):
        return torch.nn.functional.linear(torch.tanh(self.wide(x)), self.fc.weight, self.fc.bias)


def test_a_weight_used_without_its_layers_forward_is_summed_plainly(comm):
    def run(factors):
        m = Functional(comm.rank)
        sync = psgd.torch.create("syncgrad", m, comm=comm, factors=factors)
        opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
        for t in range(4):
            x, y = batch(comm.rank, t, counts(comm.rank, t))
            opt.zero_grad()
            opt.samples = len(x)
            (0.5 * ((m(x) - y) ** 2).mean()).backward()
            opt.step()
        opt.stop()
        return (np.concatenate([p.detach().numpy().ravel() for p in m.parameters()]),
                {tuple(b.members): b for b in sync.buckets.factor_buckets})
    got, buckets = run(True)
    plain, _ = run(False)
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-6)
    assert buckets[(0, 1)].plain and buckets[(0, 1)].products == 0      # fc: no rows ever
    assert buckets[(2, 3)].products == 3                                # wide: its rows


def test_the_gather_leaves_before_the_layer_computes_its_own_gradients(comm):
    """Once checked, a layer's gather starts as soon as the gradient at its
    output is in, before its weight's gradient lands; and it arrives while
    backward still runs: a hook on the first layer's input (computed last)
    waits, inside backward, for it."""
    m = deep(0)
    started, seen = [], []      # (a hook made before psgd's runs before them)
    m[2].weight.register_post_accumulate_grad_hook(lambda p: started.append(middle.started))
    sync = psgd.torch.create("syncgrad", m, comm=comm, factors=True)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    middle = [b for b in sync.buckets.factor_buckets if b.members[0] == 2][0]

    def later(grad):
        deadline = time.monotonic() + 20
        while not middle.done() and time.monotonic() < deadline:
            time.sleep(0.001)
        seen.append(middle.done())

    for t in range(3):
        x = torch.randn(4, FAN_IN, generator=torch.Generator().manual_seed(comm.rank),
                        requires_grad=True)
        hook = x.register_hook(later) if t == 2 else None
        opt.zero_grad()
        m(x).square().sum().backward()
        opt.step()
        if hook is not None:
            hook.remove()
    opt.stop()
    # step 0 learns the rows, step 1 checks them as the weight lands, step 2 leaves early
    assert started == [False, False, True]
    assert seen == [True] and middle.products == 2


@pytest.mark.parametrize("kind,tolerance", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_the_rows_travel_in_fp16_or_bf16_under_that_compression(comm, kind, tolerance):
    """Each rank's rows rounded once to the format: the model stays within the
    format's rounding of the plain uncompressed sums' (and the first step,
    summed plainly, is compressed with its residuals)."""
    bucket = same_as_plain(comm, compression=kind, plainly={"compression": "none"},
                           rtol=tolerance, atol=tolerance * 1e-2)
    assert bucket.products == 4 and not bucket.plain


def test_under_1bit_the_rows_go_as_they_are(comm):
    got, bucket = train(comm, True, compression="1bit")
    assert bucket.products == 4 and not bucket.plain


def test_rows_beyond_fp16_are_an_error_naming_the_sync_on_every_rank(comm):
    """One layer, so its rows are the only fp16 of the step that overflows."""
    m = mlp(comm.rank, layers=1)
    sync = psgd.torch.create("syncgrad", m, comm=comm, factors=True, compression="fp16")
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), sync)
    for t in range(3):
        x, y = batch(comm.rank, t, 4, out=HIDDEN)
        opt.zero_grad()
        opt.samples = 4
        (((m(x) - y) ** 2).mean() * (1e9 if t == 2 else 1.0)).backward()
        if t < 2:
            opt.step()
    with pytest.raises(UsageError, match=r"^compression=fp16: sync 3: the rows of a Linear "
                                         r"layer \(128 x 128\) hold a value beyond fp16's range"):
        opt.step()
    sync.close()


@pytest.mark.parametrize("host_of", [lambda r: r // 2, lambda r: r % 2],
                         ids=["consecutive", "alternating"])
def test_with_several_ranks_a_host_the_rows_gather_in_two_levels(comm, monkeypatch, host_of):
    """Hosts faked on one machine: the rows gather into each host's leader,
    across the leaders and back (psgd/torch_factors.py, Gather), in host
    order whichever ranks a host holds: the plain sums' model."""
    from psgd import hierarchy
    real = hierarchy.create
    monkeypatch.setattr(hierarchy, "create",
                        lambda c, host=None: real(c, host_of(c.Get_rank())))
    bucket = same_as_plain(comm)
    gather = bucket.gather
    hosts = {host_of(r) for r in range(comm.size)}
    assert (gather.levels is not None) == (1 < len(hosts) < comm.size)
    assert [host_of(r) for r in gather.order] == sorted(host_of(r) for r in range(comm.size))
    assert bucket.products == 4


def test_one_host_sums_plainly_unless_asked(comm):
    sync = psgd.torch.create("syncgrad", mlp(comm.rank), comm=comm)
    assert sync.buckets.factor_buckets == []
    sync = psgd.torch.create("syncgrad", mlp(comm.rank), comm=comm, factors=True)
    assert [b.members for b in sync.buckets.factor_buckets] == [[2, 3], [0, 1]]


@pytest.mark.parametrize("algo,options,line", [
    ("syncgrad", {"factors": "yes"}, "factors must be True, False or None"),
    ("bmuf", {"factors": True}, "factors: only syncgrad sums gradients"),
    ("syncgrad", {"factors": True, "compression": "1bit", "compression_momentum": "local"},
     "factors=True: not with compression_momentum=local"),
])
def test_a_bad_factors_option_is_one_line_on_every_rank(comm, algo, options, line):
    with pytest.raises(UsageError, match=line):
        psgd.torch.create(algo, mlp(comm.rank), comm=comm, **options)

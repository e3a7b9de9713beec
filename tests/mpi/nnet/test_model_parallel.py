"""Hybrid data/model parallelism (psgd.nnet.parallel) against one process
running the whole minibatch: every rank builds the single-process reference
itself from the same seed (no MPI in it) and compares its own slice.

Sizes: B = 60 and hidden widths 60 split over 2, 3, 4, 5 and 6 ranks; 60
classes are always sliced, 7 never (the output layer is replicated), the
MNIST-1D 10 on 2 and 5 ranks only.
"""

import numpy as np
import pytest

from psgd.data import shard_range
from psgd.errors import UsageError
from psgd.nnet import CrossEntropy, build_model, create_optimizer
from psgd.nnet.parallel import HybridNetwork, traffic
from psgd.nnet.parallel.network import hidden_widths

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

B, SEED, TOL = 60, 11, 1e-6
CASES = {
    "mlp-sliced-output": ("mlp", dict(hidden="60,60"), 60, False),
    "mlp-replicated-output": ("mlp", dict(hidden="60,60"), 7, False),
    "mlp-output-layer-only": ("mlp", dict(hidden=""), 10, False),
    "cnn-mnist1d-10-classes": ("cnn", dict(channels="4,6", hidden="60"), 10, False),
    "cnn-batchnorm-sync-bn": ("cnn", dict(channels="4,6", hidden="60", batchnorm=True), 10, True),
}


def build(case, seed=SEED, dtype=np.float64, **extra):
    model, sizes, classes, _ = CASES[case]
    opts = dict(sizes, dropout=0.0)
    opts.update(extra)
    return build_model(model, (40,), classes, dtype=dtype, seed=seed, **opts)


def pair(case, comm):
    """(hybrid network, single-process reference) from one seed."""
    ref = build(case)
    net = HybridNetwork(build(case), comm, sync_bn=CASES[case][3], seed=SEED)
    return net, ref


def minibatch(step, classes, rows=B):
    rng = np.random.default_rng([SEED, step])
    return rng.standard_normal((rows, 40)), rng.integers(0, classes, rows)


def mine(comm, a):
    b = len(a) // comm.size
    return a[comm.rank * b:(comm.rank + 1) * b]


def logits_slice(net, comm, logits):
    if not net.sliced_logits:
        return logits
    w = logits.shape[1] // comm.size
    return logits[:, comm.rank * w:(comm.rank + 1) * w]


def assert_close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    assert err <= TOL * max(1.0, float(np.max(np.abs(want))) if want.size else 1.0), (what, err)


def allgather(comm, array):
    array = np.ascontiguousarray(array)
    out = np.empty((comm.size,) + array.shape, array.dtype)
    comm.Allgather(array, out)
    return out


def skip_unless_divides(comm, case):
    widths = hidden_widths(build(case).components) + [B]
    if any(w % comm.size for w in widths):
        pytest.skip("%s does not split over %d ranks" % (case, comm.size))


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_loss_and_every_gradient_match_one_process(case, comm):
    skip_unless_divides(comm, case)
    net, ref = pair(case, comm)
    assert net.param_names == ref.param_names
    x, y = minibatch(0, CASES[case][2])
    end = ref._loss_end(CrossEntropy(np))
    assert_close(net.propagate(mine(comm, x), train=False),
                 logits_slice(net, comm, ref.propagate(x, train=False, upto=end)), "eval logits")
    loss = net.loss_and_grad(mine(comm, x), mine(comm, y))
    want = ref.loss_and_grad(x, y)
    assert abs(float(loss) - float(want)) <= TOL
    # the training forward pass left its logits in the loss's input: recompute both
    assert_close(net.propagate(mine(comm, x), train=True),
                 logits_slice(net, comm, ref.propagate(x, train=True, upto=end)), "logits")
    expected = net.local_state(dict(zip(ref.param_names, ref.grads)))
    for name, grad in zip(net.param_names, net.grads):
        assert_close(grad, expected[name], name)
    assert net.global_grad_norm() == pytest.approx(np.linalg.norm(ref.grad_buffer.data),
                                                   rel=1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_parameters_after_training_steps_match_one_process(case, comm):
    skip_unless_divides(comm, case)
    net, ref = pair(case, comm)
    opts = [create_optimizer("adam", lr=0.01) for _ in range(2)]
    for step in range(3):
        x, y = minibatch(step, CASES[case][2])
        for model, opt, xs, ys in ((net, opts[0], mine(comm, x), mine(comm, y)),
                                   (ref, opts[1], x, y)):
            model.loss_and_grad(xs, ys)
            opt.step(model.param_buffer.data, model.grad_buffer.data)
    local = net.local_state(ref.state_dict())
    for name, value in net.state_dict().items():
        assert_close(value, local[name], name)
    full = net.full_state_dict(root=0)
    if comm.rank == 0:
        want = ref.state_dict()
        assert list(full) == list(want)
        for name in want:
            assert_close(full[name], want[name], "gathered " + name)
    else:
        assert full is None


def test_batchnorm_without_sync_bn_uses_each_ranks_own_statistics(comm):
    """neon's behaviour: the reference normalises each rank's B/N rows apart,
    runs the fully connected part on all rows, and sums the conv gradients."""
    case = "cnn-batchnorm-sync-bn"
    skip_unless_divides(comm, case)
    ref = build(case)
    net = HybridNetwork(build(case), comm, sync_bn=False, seed=SEED)
    x, y = minibatch(0, 10)
    loss = net.loss_and_grad(mine(comm, x), mine(comm, y))
    first = next(i for i, c in enumerate(ref.components) if c.kind == "affine")
    head, tail = ref.components[:first], ref.components[first:-1]
    groups = np.split(x, comm.size)

    def run(layers, a):
        for layer in layers:
            a = layer.propagate(a, True)
        return a

    def back(layers, d):
        for layer in reversed(layers):
            d = layer.backpropagate(d)
        return d

    out = run(tail, np.concatenate([run(head, g) for g in groups]))
    want, dout = CrossEntropy(np).value_and_grad(out, y)
    dh = np.split(back(tail, dout), comm.size)
    n_head = sum(p.size for p, o in zip(ref.params, ref._owners) if o < first)
    head_grad = np.zeros(n_head)
    for g, d in zip(groups, dh):
        run(head, g)
        back(head, d)
        head_grad += ref.grad_buffer.data[:n_head]
    ref.grad_buffer.data[:n_head] = head_grad
    assert abs(float(loss) - float(want)) <= TOL
    expected = net.local_state(dict(zip(ref.param_names, ref.grads)))
    for name, grad in zip(net.param_names, net.grads):
        assert_close(grad, expected[name], name)
    # each rank's running statistics are its own until averaged
    stats = allgather(comm, net.stat_buffer.data)
    assert not np.allclose(stats[0], stats[1])
    net.average_stats()
    assert_close(net.stat_buffer.data, stats.mean(axis=0), "averaged statistics")


def test_sync_bn_running_statistics_are_those_of_the_whole_minibatch(comm):
    case = "cnn-batchnorm-sync-bn"
    skip_unless_divides(comm, case)
    net, ref = pair(case, comm)
    for step in range(2):
        x, y = minibatch(step, 10)
        net.loss_and_grad(mine(comm, x), mine(comm, y))
        ref.loss_and_grad(x, y)
    assert_close(net.stat_buffer.data, ref.stat_buffer.data, "running statistics")


@pytest.mark.parametrize("case", ["mlp-replicated-output", "cnn-mnist1d-10-classes"])
@pytest.mark.parametrize("extra", [3, -1])
def test_evaluation_over_uneven_shards_matches_one_process(case, extra, comm):
    """Held-out shards differ in length (some ranks may have none): short
    ranks pad with ignored rows, and the result is the whole set's."""
    skip_unless_divides(comm, case)
    net, ref = pair(case, comm)
    n = 2 * comm.size + extra
    x, y = minibatch(7, CASES[case][2], rows=n)
    y[1] = -1  # an ignored frame is not counted
    lo, hi = shard_range(n, comm.rank, comm.size)
    loss, acc = net.evaluate(x[lo:hi], y[lo:hi], batch_size=2)
    want_loss, want_acc = ref.evaluate(x, y, batch_size=n)
    assert loss == pytest.approx(want_loss, rel=1e-9)
    assert acc == want_acc


def test_state_scatter_and_bad_state(comm):
    case = "cnn-mnist1d-10-classes"
    skip_unless_divides(comm, case)
    net, _ = pair(case, comm)
    other = build(case, seed=SEED + 1).state_dict()
    net.load_full_state(other if comm.rank == 0 else None)
    want = net.local_state(other)
    for name, value in net.state_dict().items():
        assert_close(value, want[name], name)
    broken = dict(other)
    del broken[net.param_names[-1]]
    with pytest.raises(UsageError, match="missing"):
        net.load_full_state(broken if comm.rank == 0 else None)


def test_dropout_masks_are_drawn_per_slice(comm):
    """Every rank draws its own mask: the slices are not copies of one mask,
    and the data-parallel parameters stay identical across ranks."""
    case = "cnn-mnist1d-10-classes"
    skip_unless_divides(comm, case)
    net = HybridNetwork(build(case, dropout=0.5), comm, seed=SEED)
    opt = create_optimizer("sgd", lr=0.1)
    for step in range(2):
        x, y = minibatch(step, 10)
        net.loss_and_grad(mine(comm, x), mine(comm, y))
        opt.step(net.param_buffer.data, net.grad_buffer.data)
    drop = next(c for c in net.components if c.kind == "dropout")
    masks = allgather(comm, drop._mask != 0)
    assert masks.shape[1:] == (B, 60 // comm.size)
    assert 0.35 < masks.mean() < 0.65
    assert not any(np.array_equal(masks[0], m) for m in masks[1:])
    shared = allgather(comm, net.param_buffer.data[:net.dp_size])
    assert net.dp_size > 0 and all(np.array_equal(shared[0], s) for s in shared[1:])


def test_hidden_layers_that_do_not_split_are_refused_with_the_largest_n(comm):
    full = build_model("mlp", (40,), 10, hidden="211,60", seed=SEED)  # 211 is prime
    with pytest.raises(UsageError, match=r"\(211\) to be multiples of %d: at most 1 rank"
                       % comm.size):
        HybridNetwork(full, comm)


def _width(comm):
    return 1024 - 1024 % comm.size  # 1024 where it splits, the nearest multiple below otherwise


def test_bytes_per_step_for_two_wide_layers_are_as_counted_and_below_data_parallel(comm):
    N, w, b = comm.size, _width(comm), B // comm.size
    full = build_model("mlp", (40,), 10, hidden="%d,%d" % (w, w), seed=SEED)
    net = HybridNetwork(full, comm, seed=SEED)
    x, y = minibatch(0, 10)
    for _ in range(2):
        net.loss_and_grad(mine(comm, x), mine(comm, y))
    rep = net.traffic_report()
    # from first principles, float32: labels, rows there and back, two feature
    # gathers there and (into a sliced layer) back, the sliced loss statistics
    sliced = net.sliced_logits
    acts = (N - 1) * (b * 8 + 2 * b * 40 * 4 + (2 + (2 if sliced else 1)) * B * (w // N) * 4)
    if sliced:
        acts += 2 * (N - 1) / N * (B + 2 * B) * 4
    assert rep["steps"] == 2 and rep["gradients"] == 0
    assert rep["activations"] == pytest.approx(acts)
    params = 40 * w + w + w * w + w + w * 10 + 10
    assert rep["data_parallel"] == pytest.approx(2 * (N - 1) / N * params * 4)
    assert rep["pays"] and rep["hybrid"] < rep["data_parallel"] / 5
    assert "the hybrid pays" in traffic.describe(rep)


def test_wide_cnn_pays_and_a_narrow_one_does_not(comm):
    """The conv gradients are the 'gradients' share: an Allreduce of exactly
    the data-parallel prefix of the flat buffer."""
    N, w = comm.size, _width(comm)
    reports = {}
    for hidden in ("%d,%d" % (w, w), "60"):
        full = build_model("cnn", (40,), 60, hidden=hidden, dropout=0.0, seed=SEED)
        conv = sum(p.size for n, p in zip(full.param_names, full.params) if "conv1d" in n)
        net = HybridNetwork(full, comm, seed=SEED)
        assert net.dp_size == conv
        x, y = minibatch(0, 60)
        net.loss_and_grad(mine(comm, x), mine(comm, y))
        rep = reports[hidden] = net.traffic_report()
        assert rep["gradients"] == pytest.approx(2 * (N - 1) / N * conv * 4)
    assert reports["%d,%d" % (w, w)]["pays"]
    narrow = reports["60"]
    assert not narrow["pays"] and "data parallelism would move fewer" in traffic.describe(narrow)

"""The hybrid network's rules, without mpirun: which N ranks can run a
model (neon's GCD rule, the output layer exempt), the error text, the byte
accounting, and the degenerate one-rank hybrid equal to a plain Network."""
import numpy as np
import pytest
from mpi4py import MPI

from psgd.errors import UsageError
from psgd.nnet import (AffineTransform, BatchNorm, Flatten, Network, build_model,
                       create_optimizer)
from psgd.nnet.parallel import HybridNetwork, requirements, traffic
from psgd.nnet.parallel.network import hidden_widths


def message(size, hidden, minibatch=None):
    with pytest.raises(UsageError) as info:
        requirements.check(size, hidden, minibatch)
    return str(info.value)


def test_neon_example_6_200_20_allows_at_most_2_ranks():
    text = message(4, [6, 200, 20], 32)
    assert "on 4 ranks" in text
    assert "(6) to be multiples of 4" in text  # only the widths that fail
    assert "at most 2 ranks (GCD(minibatch 32; hidden 6,200,20) = 2)" in text
    requirements.check(2, [6, 200, 20], 32)


def test_twelve_units_in_the_first_layer_allow_4_ranks():
    assert requirements.largest_ranks(32, [12, 200, 20]) == 4
    requirements.check(4, [12, 200, 20], 32)
    assert "at most 4 ranks" in message(8, [12, 200, 20], 32)


def test_minibatch_must_split_too():
    text = message(4, [256], 30)
    assert "the global minibatch (30)" in text and "hidden" not in text.split(":")[0]
    assert "at most 2 ranks (GCD(minibatch 30; hidden 256) = 2)" in text


def test_more_ranks_would_work_names_the_largest_divisor_below():
    text = message(3, [256], 32)
    assert "N ranks work when N divides GCD(minibatch 32; hidden 256) = 32" in text
    assert "the largest below 3 is 2" in text
    assert "at most 1 rank (" in message(2, [211], 64)


def test_output_layer_is_exempt_sliced_only_when_it_divides():
    # MNIST-1D's 10 classes: sliced on 2 and 5 ranks, replicated on 3 and 4
    assert [requirements.logits_sliced(10, n) for n in (1, 2, 3, 4, 5)] == \
        [True, True, False, False, True]
    net = build_model("cnn", (40,), 10, hidden="256")
    assert hidden_widths(net.components) == [256]
    assert hidden_widths(build_model("mlp", (40,), 10, hidden="6,200,20").components) == \
        [6, 200, 20]
    assert hidden_widths(build_model("mlp", (40,), 10, hidden="").components) == []


def test_traffic_formulas_and_the_verdict():
    assert traffic.allgather_bytes(100, 4) == 300
    assert traffic.reduce_scatter_bytes(100, 4) == 300
    assert traffic.allreduce_bytes(400, 4) == 600
    assert traffic.allreduce_bytes(400, 1) == 0
    assert traffic.data_parallel_bytes(1000, 4, 2) == 4000
    t = traffic.Traffic()
    t.add("activations", 10)  # not inside a step: not counted
    t.active = True
    t.add("activations", 300)
    t.add("gradients", 100)
    t.steps = 2
    rep = traffic.report(t, 1000, 4, 2)
    assert (rep["activations"], rep["gradients"], rep["hybrid"]) == (150, 50, 200)
    assert rep["pays"] and rep["ratio"] == pytest.approx(0.05)
    assert "the hybrid pays" in traffic.describe(rep)
    assert not traffic.report(t, 10, 4, 2)["pays"]


def test_one_rank_hybrid_is_the_plain_network():
    """On one rank every gather is the identity and every slice the whole:
    the same steps give the same parameters."""
    ref = build_model("cnn", (40,), 10, channels="3", hidden="8", dropout=0.0,
                      dtype=np.float64, seed=5)
    net = HybridNetwork(build_model("cnn", (40,), 10, channels="3", hidden="8", dropout=0.0,
                                    dtype=np.float64, seed=5), MPI.COMM_SELF, seed=5)
    assert net.param_names == ref.param_names and net.dp_size > 0
    opts = [create_optimizer("momentum", lr=0.05) for _ in range(2)]
    rng = np.random.default_rng(0)
    for _ in range(2):
        x, y = rng.standard_normal((12, 40)), rng.integers(0, 10, 12)
        for model, opt in zip((net, ref), opts):
            model.loss_and_grad(x, y)
            opt.step(model.param_buffer.data, model.grad_buffer.data)
    np.testing.assert_allclose(net.param_buffer.data, ref.param_buffer.data, atol=1e-12)
    full = net.full_state_dict()
    assert all(np.allclose(full[k], v) for k, v in ref.state_dict().items())
    assert net.traffic_report()["hybrid"] == 0  # one rank moves nothing


def test_only_fully_connected_and_elementwise_layers_may_be_sliced():
    net = Network([AffineTransform(4, 6), BatchNorm(6), AffineTransform(6, 2)])
    with pytest.raises(UsageError, match="BatchNorm.*cannot follow the first fully connected"):
        HybridNetwork(net, MPI.COMM_SELF)
    with pytest.raises(UsageError, match="needs a fully connected"):
        HybridNetwork(Network([Flatten()]), MPI.COMM_SELF)

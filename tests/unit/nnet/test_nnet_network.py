"""Network: one flat buffer, views, checkpoints, rebind, loss and evaluation."""
import numpy as np
import pytest

from psgd.buffers import FlatBuffer
from psgd.errors import UsageError
from psgd.nnet import (AffineTransform, BatchNorm, Conv1d, Dropout, Flatten, Network, ReLU,
                       Softmax, Tanh)


def small_net(seed=0, dtype=np.float32):
    return Network([Conv1d(2, 3, 3, padding=1), ReLU(), BatchNorm(3), Flatten(),
                    AffineTransform(18, 5), Tanh(), AffineTransform(5, 4), Softmax()],
                   dtype=dtype, seed=seed)


def batch(n=7, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 2, 6)).astype(np.float32), rng.integers(0, 4, n)


def _base(a):
    while a.base is not None:
        a = a.base
    return a


def test_params_are_views_of_one_flat_buffer():
    net = small_net()
    assert [tuple(p.shape) for p in net.params] == [(3, 2, 3), (3,), (3,), (3,), (5, 18),
                                                   (5,), (4, 5), (4,)]
    assert net.param_names == ["0.conv1d.W", "0.conv1d.b", "2.batchnorm.gamma",
                               "2.batchnorm.beta", "4.affine.W", "4.affine.b",
                               "6.affine.W", "6.affine.b"]
    assert net.num_params == net.param_buffer.data.size == sum(p.size for p in net.params)
    assert all(_base(p) is net.param_buffer.data for p in net.params)
    assert all(_base(g) is net.grad_buffer.data for g in net.grads)
    net.param_buffer.data[:] = 0.25
    assert all(np.all(p == 0.25) for p in net.params)
    # and the components compute with those very views
    assert np.all(net.components[4].W == 0.25)
    x, y = batch()
    net.loss_and_grad(x, y)
    assert np.shares_memory(net.components[0].dW, net.grad_buffer.data)
    assert np.any(net.grad_buffer.data != 0)


def test_stat_buffer_holds_batchnorm_statistics():
    net = small_net()
    assert net.stat_names == ["2.batchnorm.running_mean", "2.batchnorm.running_var"]
    np.testing.assert_array_equal(net.stat_buffer.data, [0, 0, 0, 1, 1, 1])
    net.loss_and_grad(*batch())
    assert np.any(net.stat_buffer.data[:3] != 0)
    plain = Network([AffineTransform(3, 2)])
    assert plain.stat_buffer.size == 0 and plain.state_dict().keys() == {"0.affine.W", "0.affine.b"}


def test_seed_decides_initialisation():
    a, b, c = small_net(seed=1), small_net(seed=1), small_net(seed=2)
    np.testing.assert_array_equal(a.param_buffer.data, b.param_buffer.data)
    assert not np.array_equal(a.param_buffer.data, c.param_buffer.data)


def test_loss_and_grad_matches_finite_differences():
    net = small_net(dtype=np.float64)
    x, y = batch()
    x = x.astype(np.float64)
    net.param_buffer.data[:] += 0.05 * np.random.default_rng(5).standard_normal(net.num_params)
    loss = float(net.loss_and_grad(x, y))
    grad = net.grad_buffer.data.copy()
    w = net.param_buffer.data
    eps = 1e-6
    for i in np.random.default_rng(0).choice(w.size, 30, replace=False):
        old = w[i]
        w[i] = old + eps
        up = float(net.loss_and_grad(x, y))
        w[i] = old - eps
        down = float(net.loss_and_grad(x, y))
        w[i] = old
        assert grad[i] == pytest.approx((up - down) / (2 * eps), abs=1e-7)
    # the skipped Softmax: the loss is cross-entropy of the posteriors (train
    # mode: BatchNorm normalises with the batch statistics, as in the loss)
    p = net.propagate(x, train=True)
    np.testing.assert_allclose(p.sum(axis=1), 1)
    assert loss == pytest.approx(-np.log(p[np.arange(len(y)), y]).mean(), rel=1e-9)


def test_state_dict_round_trip():
    a = small_net(seed=1)
    a.loss_and_grad(*batch())           # moves the BatchNorm statistics
    state = a.state_dict()
    assert set(state) == set(a.param_names + a.stat_names)
    assert all(isinstance(v, np.ndarray) for v in state.values())
    b = small_net(seed=2)
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.param_buffer.data, a.param_buffer.data)
    np.testing.assert_array_equal(b.stat_buffer.data, a.stat_buffer.data)
    x, _ = batch(seed=3)
    np.testing.assert_array_equal(b.predict(x), a.predict(x))
    state["4.affine.b"][0] += 1          # a copy, not a view
    assert a.params[5][0] != state["4.affine.b"][0]


def test_bad_state_dict_is_a_usage_error():
    net, state = small_net(), small_net().state_dict()
    missing = dict(state)
    del missing["6.affine.W"]
    with pytest.raises(UsageError, match="missing.*6.affine.W"):
        net.load_state_dict(missing)
    with pytest.raises(UsageError, match="unexpected.*9.lstm.U"):
        net.load_state_dict(dict(state, **{"9.lstm.U": np.zeros(3)}))
    with pytest.raises(UsageError, match="4.affine.b.*shape"):
        net.load_state_dict(dict(state, **{"4.affine.b": np.zeros(6)}))
    before = net.param_buffer.data.copy()
    with pytest.raises(UsageError):
        net.load_state_dict(dict(state, **{"0.conv1d.W": np.zeros((3, 2, 2))}))
    np.testing.assert_array_equal(net.param_buffer.data, before)  # nothing half-loaded


def test_rebind_to_another_flat_buffer():
    net = small_net()
    x, y = batch()
    params = net.param_buffer.copy()
    grads = net.grad_buffer.like()
    net.rebind(params.views, grads.views)
    assert net.param_buffer.data is params.data and net.grad_buffer.data is grads.data
    p0 = net.predict(x)
    params.data *= 0.5
    assert not np.allclose(net.predict(x), p0)      # computes with the new memory
    net.loss_and_grad(x, y)
    assert np.any(grads.data != 0)
    with pytest.raises(UsageError, match="shapes"):
        net.rebind(params.views[:-1])
    loose = [v.copy() for v in params.views]
    with pytest.raises(UsageError, match="consecutive views"):
        net.rebind(loose)
    other = FlatBuffer.allocate(params.shapes, np.float64)
    with pytest.raises(UsageError, match="float32"):
        net.rebind(other.views)


def test_predict_in_batches_and_evaluate():
    net = small_net()
    x, y = batch(n=23, seed=4)
    full = net.predict(x)
    np.testing.assert_allclose(net.predict(x, batch_size=5), full, rtol=1e-6)
    loss, acc = net.evaluate(x, y, batch_size=4)
    assert acc == pytest.approx(np.mean(full.argmax(1) == y))
    assert loss == pytest.approx(-np.log(full[np.arange(23), y]).mean(), rel=1e-5)
    # eval mode leaves BatchNorm statistics alone
    stats = net.stat_buffer.data.copy()
    net.evaluate(x, y)
    np.testing.assert_array_equal(net.stat_buffer.data, stats)


def test_reseed_changes_dropout_masks_only():
    def net():
        return Network([AffineTransform(6, 6), Dropout(0.5)], seed=0)
    a, b = net(), net()
    x = np.ones((4, 6), np.float32)
    np.testing.assert_array_equal(a.propagate(x), b.propagate(x))   # same seed, same masks
    params = b.param_buffer.data.copy()
    b.reseed(1)
    np.testing.assert_array_equal(b.param_buffer.data, params)
    assert not np.array_equal(a.propagate(x), b.propagate(x))
    a.reseed(1)
    b.reseed(1)
    np.testing.assert_array_equal(a.propagate(x), b.propagate(x))


def test_mse_loss_trains_an_output_layer():
    net = Network([AffineTransform(3, 2)], dtype=np.float64, seed=0)
    x = np.random.default_rng(0).standard_normal((10, 3))
    target = x @ np.array([[1.0, 0.0], [0.5, -1.0], [0.0, 2.0]])
    first = float(net.loss_and_grad(x, target, loss="mse"))
    for _ in range(200):
        net.loss_and_grad(x, target, loss="mse")
        net.param_buffer.data -= 0.1 * net.grad_buffer.data
    assert float(net.loss_and_grad(x, target, loss="mse")) < 1e-3 * first
    with pytest.raises(UsageError, match="unknown loss"):
        net.loss_and_grad(x, target, loss="hinge")

"""Forward behaviour of components against direct reference formulas."""
import numpy as np
import pytest

from psgd.nnet import (LSTM, AffineTransform, BatchNorm, Conv1d, Dropout, MaxPool1d, ReLU,
                       Sigmoid, Softmax, Splice, Tanh)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), (3, 2)])
def test_conv1d_matches_direct_sum(bind, stride, padding):
    comp = Conv1d(2, 3, kernel=4, stride=stride, padding=padding)
    bind(comp)
    x = randn(2, 2, 10)
    y = comp.propagate(x)
    xpad = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    l_out = (10 + 2 * padding - 4) // stride + 1
    ref = np.zeros((2, 3, l_out))
    for t in range(l_out):
        # y[b, o, t] = b[o] + sum_{c,k} W[o, c, k] x[b, c, t*stride + k]
        seg = xpad[:, :, t * stride:t * stride + 4]
        ref[:, :, t] = np.einsum("bck,ock->bo", seg, comp.W) + comp.b
    np.testing.assert_allclose(y, ref, rtol=1e-12)


def test_maxpool1d_values():
    x = np.array([[[1.0, 5.0, 2.0, 4.0, 3.0, 0.0, 7.0]]])
    np.testing.assert_array_equal(MaxPool1d(2).propagate(x), [[[5, 4, 3]]])
    np.testing.assert_array_equal(MaxPool1d(3, stride=2, padding=1).propagate(x),
                                  [[[5, 5, 4, 7]]])
    pool = MaxPool1d(2)
    pool.propagate(x)
    np.testing.assert_array_equal(pool.backpropagate(np.array([[[1.0, 2.0, 3.0]]])),
                                  [[[0, 1, 0, 2, 3, 0, 0]]])


def test_pooling_geometry_is_checked():
    with pytest.raises(ValueError, match="padding must be <= kernel // 2"):
        MaxPool1d(2, padding=2)
    with pytest.raises(ValueError, match="stride >= 1"):
        Conv1d(1, 1, 3, stride=0)


def test_splice_replicates_edges():
    x = np.arange(4.0).reshape(1, 4, 1)          # frames 0,1,2,3 of one feature
    y = Splice(1, context=2).propagate(x)
    np.testing.assert_array_equal(y[0], [[0, 0, 0, 1, 2],
                                         [0, 0, 1, 2, 3],
                                         [0, 1, 2, 3, 3],
                                         [1, 2, 3, 3, 3]])
    # a batch never mixes sequences; (T, F) is one utterance
    two = np.stack([x[0], x[0] + 10])
    y2 = Splice(1, context=2).propagate(two)
    np.testing.assert_array_equal(y2[1], y[0] + 10)
    np.testing.assert_array_equal(Splice(1, context=2).propagate(x[0]), y[0])


def test_dropout_train_and_eval():
    comp = Dropout(0.25, seed=1)
    x = np.ones((200, 100), dtype=np.float32)
    np.testing.assert_array_equal(comp.propagate(x, train=False), x)
    y = comp.propagate(x)
    assert y.dtype == np.float32
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.02
    assert abs(y.mean() - 1) < 0.03                # inverted scaling keeps the mean
    assert not np.array_equal(comp.propagate(x), y)  # fresh mask per call
    comp.reseed(1)
    np.testing.assert_array_equal(comp.propagate(x), y)
    np.testing.assert_array_equal(comp.backpropagate(np.full_like(x, 2)), 2 * y)


def test_batchnorm_statistics(bind):
    comp = BatchNorm(3, axis=1, momentum=0.2)
    bind(comp)
    comp.gamma[...] = 1
    comp.beta[...] = 0
    x = 2 + 3 * randn(8, 3, 5)
    y = comp.propagate(x)
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 2)), 1, rtol=1e-4)
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2), ddof=1)
    np.testing.assert_allclose(comp.running_mean, 0.8 * 0 + 0.2 * mean)
    np.testing.assert_allclose(comp.running_var, 0.8 * 1 + 0.2 * var)
    rm, rv = comp.running_mean.copy(), comp.running_var.copy()
    y_eval = comp.propagate(x, train=False)
    expect = (x - rm[None, :, None]) / np.sqrt(rv[None, :, None] + comp.eps)
    np.testing.assert_allclose(y_eval, expect)
    np.testing.assert_array_equal(comp.running_mean, rm)   # eval leaves stats alone


def _lstm_reference(comp, x, h, c):
    """The textbook LSTM, one step at a time, gates packed (i, f, o, g)."""
    H = comp.cells
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    out = []
    for t in range(x.shape[1]):
        z = x[:, t] @ comp.W.T + h @ comp.U.T + comp.b
        i, f, o = sig(z[:, :H]), sig(z[:, H:2 * H]), sig(z[:, 2 * H:3 * H])
        g = np.tanh(z[:, 3 * H:])
        c = f * c + i * g
        h = o * np.tanh(c)
        out.append(h)
    return np.stack(out, axis=1), h, c


def test_lstm_matches_reference_and_carries_state(bind):
    comp = LSTM(3, 4, stateful=True)
    bind(comp)
    x = randn(2, 6, 3)
    zeros = np.zeros((2, 4))
    ref, h, c = _lstm_reference(comp, x, zeros, zeros)
    # two stateful chunks of 3 frames == one pass over 6 frames
    y1 = comp.propagate(x[:, :3])
    y2 = comp.propagate(x[:, 3:])
    np.testing.assert_allclose(np.concatenate([y1, y2], axis=1), ref, rtol=1e-10)
    np.testing.assert_allclose(comp.get_state()[0], h, rtol=1e-10)
    np.testing.assert_allclose(comp.get_state()[1], c, rtol=1e-10)
    # evaluation starts from zeros and keeps the training state
    np.testing.assert_allclose(comp.propagate(x[:, :3], train=False), ref[:, :3], rtol=1e-10)
    np.testing.assert_allclose(comp.get_state()[0], h, rtol=1e-10)
    comp.reset_state()
    np.testing.assert_allclose(comp.propagate(x[:, :3]), ref[:, :3], rtol=1e-10)
    # a different batch size starts a new set of sequences
    np.testing.assert_allclose(comp.propagate(x[:1, :3]), ref[:1, :3], rtol=1e-10)


def test_lstm_stateless_restarts_every_chunk(bind):
    comp = LSTM(3, 4)
    bind(comp)
    x = randn(2, 4, 3)
    first = comp.propagate(x)
    np.testing.assert_array_equal(comp.propagate(x), first)


def test_affine_time_distributed_equals_per_frame(bind):
    comp = AffineTransform(5, 2)
    bind(comp)
    x = randn(3, 4, 5)
    y = comp.propagate(x)
    for t in range(4):
        np.testing.assert_allclose(y[:, t], x[:, t] @ comp.W.T + comp.b, rtol=1e-12)


@pytest.mark.parametrize("make", [lambda: AffineTransform(4, 3), lambda: Conv1d(4, 2, 3),
                                  lambda: LSTM(4, 2), lambda: BatchNorm(4)])
def test_backprop_overwrites_gradients(bind, make):
    comp = make()
    _, grads = bind(comp)
    x = randn(2, 4, 5) if not isinstance(comp, AffineTransform) else randn(2, 4)
    if isinstance(comp, LSTM):
        x = x.transpose(0, 2, 1)
    dy = randn(*comp.propagate(x).shape, seed=4)
    comp.backpropagate(dy)
    first = grads.data.copy()
    assert np.any(first != 0)
    comp.propagate(x)
    comp.backpropagate(dy)
    np.testing.assert_array_equal(grads.data, first)


@pytest.mark.parametrize("comp", [ReLU(), Sigmoid(), Tanh(), Softmax()])
def test_activation_values_and_dtype(comp):
    x = np.array([[-100.0, -1.0, 0.0, 2.0]], dtype=np.float32)
    y = comp.propagate(x)
    assert y.dtype == np.float32 and np.all(np.isfinite(y))
    expect = {"relu": np.maximum(x, 0), "sigmoid": 1 / (1 + np.exp(-x.astype(np.float64))),
              "tanh": np.tanh(x), "softmax": np.exp(x) / np.exp(x).sum()}[comp.kind]
    np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-30)

"""Finite-difference gradient checks (float64) for every component and loss."""
import numpy as np
import pytest

from psgd.nnet import (LSTM, MSE, AffineTransform, BatchNorm, Conv1d, CrossEntropy, Dropout,
                       Flatten, LastFrame, MaxPool1d, ReLU, Reshape, Sigmoid, Softmax, Splice,
                       Tanh)


def randn(*shape, seed=3):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 4)], ids=["2d", "time-distributed"])
def test_affine(gradcheck, bind, shape):
    comp = AffineTransform(4, 3)
    bind(comp)
    y = gradcheck(comp, randn(*shape))
    assert y.shape == shape[:-1] + (3,)


@pytest.mark.parametrize("cls", [ReLU, Sigmoid, Tanh, Softmax])
def test_activations(gradcheck, bind, cls):
    comp = cls()
    bind(comp)
    gradcheck(comp, randn(4, 6))


@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 2), (2, 1), (3, 2)])
def test_conv1d(gradcheck, bind, stride, padding):
    comp = Conv1d(3, 4, kernel=3, stride=stride, padding=padding)
    bind(comp)
    x = randn(2, 3, 11)
    y = gradcheck(comp, x)
    assert y.shape[1:] == comp.output_shape((3, 11))


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 0)],
                         ids=["disjoint", "overlap-padded", "overlap"])
def test_maxpool1d(gradcheck, bind, kernel, stride, padding):
    comp = MaxPool1d(kernel, stride=stride, padding=padding)
    bind(comp)
    y = gradcheck(comp, randn(2, 3, 9))
    assert y.shape[1:] == comp.output_shape((3, 9))


@pytest.mark.parametrize("shape,axis", [((6, 4), 1), ((3, 4, 5), 1), ((3, 5, 4), -1)],
                         ids=["features", "channels", "frames"])
def test_batchnorm_train(gradcheck, bind, shape, axis):
    comp = BatchNorm(4, axis=axis)
    bind(comp)
    gradcheck(comp, randn(*shape))


def test_batchnorm_eval(gradcheck, bind):
    comp = BatchNorm(4)
    bind(comp)
    comp.running_mean[...] = [0.1, -0.2, 0.3, 0.0]
    comp.running_var[...] = [1.5, 0.5, 2.0, 1.0]
    gradcheck(comp, randn(5, 4), train=False)


@pytest.mark.parametrize("shape", [(2, 6, 3), (6, 3), (2, 2, 3)],
                         ids=["batch", "utterance", "short-sequence"])
@pytest.mark.parametrize("offsets", [None, [-3, 0, 1, 4]], ids=["context2", "offsets"])
def test_splice(gradcheck, bind, shape, offsets):
    comp = Splice(3, context=2, offsets=offsets)
    bind(comp)
    gradcheck(comp, randn(*shape))


def test_dropout_fixed_mask(gradcheck, bind):
    comp = Dropout(0.4)
    bind(comp)
    y = gradcheck(comp, randn(6, 5), before=lambda: comp.reseed(7))
    assert (y == 0).any() and (y != 0).any()


@pytest.mark.parametrize("stateful", [False, True])
def test_lstm(gradcheck, bind, stateful):
    comp = LSTM(3, 4, stateful=stateful)
    bind(comp)
    x = randn(2, 5, 3)
    if stateful:
        # a later chunk: the carried state is an input constant, no gradient
        h0, c0 = 0.5 * randn(2, 4, seed=8), randn(2, 4, seed=9)
        y = gradcheck(comp, x, before=lambda: comp.set_state(h0, c0))
    else:
        y = gradcheck(comp, x)
    assert y.shape == (2, 5, 4)


@pytest.mark.parametrize("comp,shape", [(Flatten(), (2, 3, 4)), (Reshape((4, 3)), (2, 12)),
                                         (LastFrame(), (2, 5, 3))])
def test_shape_components(gradcheck, bind, comp, shape):
    bind(comp)
    gradcheck(comp, randn(*shape))


def _loss_check(loss, out, targets, eps=1e-6):
    out = np.array(out, dtype=np.float64)
    value, grad = loss.value_and_grad(out, targets)
    numeric = np.zeros_like(out)
    for idx in np.ndindex(out.shape):
        old = out[idx]
        out[idx] = old + eps
        up = float(loss.value_and_grad(out, targets)[0])
        out[idx] = old - eps
        down = float(loss.value_and_grad(out, targets)[0])
        out[idx] = old
        numeric[idx] = (up - down) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, atol=1e-8)
    return float(value)


@pytest.mark.parametrize("targets", ["labels", "labels-ignored", "soft", "frames"])
def test_cross_entropy(targets):
    rng = np.random.default_rng(0)
    logits = 3 * rng.standard_normal((5, 4))
    if targets == "labels":
        t = np.array([0, 3, 1, 1, 2])
    elif targets == "labels-ignored":
        t = np.array([0, -1, 1, -1, 2])
    elif targets == "soft":
        t = rng.dirichlet(np.ones(4), size=5)
    else:
        logits = logits.reshape(5, 1, 4).repeat(2, axis=1)
        t = np.array([[0, 1], [3, 3], [1, 2], [1, -1], [2, 0]])
    value = _loss_check(CrossEntropy(np), logits, t)
    # the value itself, written out: -mean log softmax of the target
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    if t.dtype.kind == "f":
        expect = -(t * logp).sum(-1).mean()
    else:
        keep = t >= 0
        expect = -np.take_along_axis(logp, np.where(keep, t, 0)[..., None], -1)[..., 0][keep].mean()
    assert value == pytest.approx(expect, rel=1e-12)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    value, grad = CrossEntropy(np).value_and_grad(logits, np.array([2]))
    assert np.isfinite(value) and value == pytest.approx(2000.0)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("targets", ["dense", "labels"])
def test_mse(targets):
    rng = np.random.default_rng(1)
    out = rng.standard_normal((4, 3))
    t = rng.standard_normal((4, 3)) if targets == "dense" else np.array([2, 0, -1, 1])
    value = _loss_check(MSE(np), out, t)
    dense = t if targets == "dense" else np.eye(3)[t] * (t >= 0)[:, None]
    rows = np.ones(4, bool) if targets == "dense" else t >= 0
    expect = 0.5 * ((out - dense) ** 2).sum(-1)[rows].mean()
    assert value == pytest.approx(expect, rel=1e-12)

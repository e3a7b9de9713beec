"""The same nnet code on a device: results must match the NumPy backend.

On the simulated device always; on CuPy only with a CUDA device."""
import numpy as np
import pytest

from device_util import device_fixture
from psgd.nnet import Dropout, build_model, create_optimizer


cp = device_fixture()     # the simulated device; CuPy on a GPU when present

CASES = [
    ("cnn", (40,), {}, (6, 40), 10),
    ("cnn", (2, 17), {"batchnorm": True, "kernel": 4, "stride": 2, "pool": 3}, (6, 2, 17), 10),
    ("mlp", (40,), {"dropout": 0}, (6, 40), 10),
    ("lstm", (5, 3), {"context": 1, "lstm_cells": "8,6", "hidden": "7"}, (6, 5, 3), 4),
]


@pytest.mark.parametrize("name,shape,opts,xshape,classes", CASES,
                         ids=["cnn", "cnn-bn-stride", "mlp", "lstm"])
def test_forward_backward_match_numpy(cp, name, shape, opts, xshape, classes):
    opts = dict(opts)
    if name == "cnn":
        opts.setdefault("dropout", 0)
    host = build_model(name, shape, classes, seed=3, **opts)
    dev = build_model(name, shape, classes, xp=cp, seed=3, **opts)
    np.testing.assert_array_equal(dev.param_buffer.data.get(), host.param_buffer.data)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xshape).astype(np.float32)
    y = rng.integers(0, classes, xshape[:2] if name == "lstm" else xshape[:1])
    loss_h = float(host.loss_and_grad(x, y))
    loss_d = float(dev.loss_and_grad(cp.asarray(x), cp.asarray(y)))
    assert loss_d == pytest.approx(loss_h, rel=1e-4)
    np.testing.assert_allclose(dev.grad_buffer.data.get(), host.grad_buffer.data,
                               rtol=2e-3, atol=1e-5)
    np.testing.assert_allclose(dev.stat_buffer.data.get(), host.stat_buffer.data, rtol=1e-4)
    np.testing.assert_allclose(dev.predict(x).get(), host.predict(x), rtol=1e-3, atol=1e-6)
    state = dev.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    host.load_state_dict(state)


@pytest.mark.parametrize("name", ["adam", "momentum", "nesterov", "rmsprop", "adadelta"])
def test_optimizer_steps_match_numpy(cp, name):
    rng = np.random.default_rng(1)
    w_h = rng.standard_normal(1000).astype(np.float32)
    w_d = cp.asarray(w_h)
    opt_h = create_optimizer(name, weight_decay=0.01, clip=5.0)
    opt_d = create_optimizer(name, weight_decay=0.01, clip=5.0)
    for _ in range(5):
        g = rng.standard_normal(1000).astype(np.float32)
        opt_h.step(w_h, g.copy())
        opt_d.step(w_d, cp.asarray(g))
    np.testing.assert_allclose(w_d.get(), w_h, rtol=1e-5, atol=1e-6)
    state = opt_d.state_dict()
    assert all(isinstance(state[s], np.ndarray) for s in opt_d.slots)


def test_dropout_on_device(cp):
    comp = Dropout(0.5, seed=0)
    comp.setup(cp, np.float32)
    y = comp.propagate(cp.ones((100, 100), dtype=cp.float32))
    frac = float((y == 0).mean())
    assert 0.45 < frac < 0.55 and float(y.max()) == pytest.approx(2.0)

"""Helpers for the nnet tests: binding a lone component and a float64
finite-difference gradient check."""
import numpy as np
import pytest

from psgd.buffers import FlatBuffer


def bind_component(comp, dtype=np.float64, seed=0):
    """Give `comp` its own flat param/grad/stat buffers, as a Network would."""
    comp.setup(np, dtype)
    shapes = [s for _, s in comp.param_shapes()]
    params = FlatBuffer.allocate(shapes, dtype)
    grads = FlatBuffer.allocate(shapes, dtype)
    comp.bind(params.views, grads.views)
    stats = FlatBuffer.allocate([s for _, s in comp.stat_shapes()], dtype)
    comp.bind_stats(stats.views)
    comp.init_stats()
    comp.init_params(np.random.default_rng(seed))
    # nonzero biases etc. so every parameter's gradient path is exercised
    rng = np.random.default_rng(seed + 1)
    for view in params.views:
        view += 0.1 * rng.standard_normal(view.shape)
    return params, grads


def _numeric(f, array, indices, eps):
    out = []
    for idx in indices:
        old = array[idx]
        array[idx] = old + eps
        up = f()
        array[idx] = old - eps
        down = f()
        array[idx] = old
        out.append((up - down) / (2 * eps))
    return np.array(out)


def _sample(shape, count, rng):
    size = int(np.prod(shape))
    flat = np.arange(size) if size <= count else rng.choice(size, count, replace=False)
    return [np.unravel_index(i, shape) for i in flat]


def gradient_check(comp, x, before=None, train=True, eps=1e-6, tol=1e-6, count=40, seed=0):
    """Compare backpropagate (input and every parameter) with central
    differences of L = sum(r * propagate(x)) for a random r. `before()` runs
    before every forward (to fix a dropout mask or an initial state)."""
    rng = np.random.default_rng(seed)
    before = before or (lambda: None)
    x = np.array(x, dtype=np.float64)
    before()
    y = comp.propagate(x, train)
    r = rng.standard_normal(y.shape)

    def f():
        before()
        return float(np.sum(r * comp.propagate(x, train)))

    before()
    comp.propagate(x, train)
    dx = comp.backpropagate(r.copy())
    assert dx.shape == x.shape
    checks = [("input", x, dx)]
    for name, _ in comp.param_shapes():
        checks.append((name, getattr(comp, name), getattr(comp, "d" + name).copy()))
    for name, array, analytic in checks:
        idx = _sample(array.shape, count, rng)
        numeric = _numeric(f, array, idx, eps)
        got = np.array([analytic[i] for i in idx])
        scale = max(1.0, np.abs(numeric).max())
        err = np.abs(got - numeric).max() / scale
        assert err < tol, "%s gradient of %r off by %.3g (scaled)" % (name, comp, err)
    return y


@pytest.fixture
def gradcheck():
    return gradient_check


@pytest.fixture
def bind():
    return bind_component

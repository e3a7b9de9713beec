"""The host kernels give the same bits block by block as the whole-array
NumPy formulas, across block edges, and leave their inputs alone."""
import numpy as np
import pytest

from psgd import kernels


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch, setting):
    monkeypatch.setattr(kernels, "BLOCK", 7)       # many blocks, a ragged last one
    setting("PSGD_ACCEL", "auto")


SHAPES = [(0,), (1,), (7,), (50,), (3, 5)]


def arrays(shape, dtype, count):
    rng = np.random.default_rng(sum(shape) + count)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(count)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lerp_and_axpy(shape, dtype):
    a, b = arrays(shape, dtype, 2)
    t = np.dtype(dtype).type
    out = kernels.lerp(a.copy(), b, 0.3)
    assert np.array_equal(out, a + (b - a) * t(0.3))
    for alpha in (1.0, -0.7):
        assert np.array_equal(kernels.axpy(a.copy(), alpha, b), a + t(alpha) * b)
    assert np.array_equal(b, arrays(shape, dtype, 2)[1])   # b is read only


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("zeta,nesterov", [(1.0, True), (0.8, True), (1.0, False)])
def test_bmuf_update(shape, zeta, nesterov):
    w, g, d = arrays(shape, np.float32, 3)
    t = np.float32
    look = 0.75 if nesterov else 0.0
    d_new = t(0.75 - zeta * look) * d + (w - g) * t(zeta)
    g_new = g + d_new
    w_new = g_new + t(look) * d_new
    w2, g2, d2 = w.copy(), g.copy(), d.copy()
    kernels.bmuf_update(w2, g2, d2, 0.75, zeta, nesterov)
    for got, want in ((w2, w_new), (g2, g_new), (d2, d_new)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def bits(a):
    return a.view(np.uint8).tobytes()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("start,zeta", [(0.5, 1.0), (0.0, 0.8), (1.0, 1.3)])
def test_bmuf_share_gives_the_separate_passes_bits(shape, start, zeta):
    """The pass bmuf's compressed sync made in seven (start point, contribution,
    share, error feedback), in one: the same bits, signed zeros and NaN too."""
    e, share, w, w_g, D = arrays(shape, np.float32, 5)
    w.flat[:3] = [np.nan, -0.0, np.inf][:w.size]
    t = np.float32
    s = w_g.copy()
    s += D * t(start)                       # the start point, as axpy made it
    c = (w - s) * t(0.25)                   # the contribution
    want_share = share * t(0.5) + c * t(zeta)
    want_e = e + want_share
    kernels.bmuf_share(e, share, w, w_g, D, start, 0.25, 0.5, zeta)
    assert bits(share) == bits(want_share) and bits(e) == bits(want_e)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("start", [0.5, 0.0, 1.0])
def test_bmuf_contribution_gives_the_separate_passes_bits(shape, start):
    """The error feedback's contribution (the contract's global momentum) in
    one pass, the start point made on the way: the bits of start_point +
    add_delta, and nothing else written."""
    e, w, w_g, D = arrays(shape, np.float32, 4)
    w_g.flat[:2] = [-0.0, np.nan][:w_g.size]
    s = w_g.copy()
    s += D * np.float32(start)
    want_e = e + (w - s) * np.float32(0.25)
    before = [bits(a) for a in (w, w_g, D)]
    kernels.bmuf_contribution(e, w, w_g, D, start, 0.25)
    assert bits(e) == bits(want_e)
    assert [bits(a) for a in (w, w_g, D)] == before


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("look,zeta", [(0.75, 0.8), (0.75, 1.0), (None, 1.3)])
def test_bmuf_update_delta_is_the_filter_on_g(shape, look, zeta):
    """D <- eta D + zeta G, w_g <- w_g + D, w <- w_g + look D (or w_g):
    the separate passes' bits, signed zeros and infinities too."""
    G, w_g, D = arrays(shape, np.float32, 3)
    G.flat[:2] = [np.inf, -0.0][:G.size]
    t = np.float32
    want_D = D * t(0.75) + G * t(zeta)
    want_g = w_g + want_D
    want_w = want_g if look is None else want_D * t(look) + want_g
    kernels.bmuf_update_delta(G, w_g, D, 0.75, zeta, look)
    assert bits(D) == bits(want_D) and bits(w_g) == bits(want_g) and bits(G) == bits(want_w)


@pytest.mark.parametrize("nesterov", [True, False])
def test_bmuf_update_delta_keeps_g_that_s_plus_g_rounds_away(nesterov):
    """The filter on the mean model w = s + G sees G only to the model's
    precision; on G itself it keeps every digit: a delta far below the
    weights' last place still moves the momentum."""
    w_g = np.full(8, 1000.0, np.float32)
    D = np.zeros(8, np.float32)
    G = np.full(8, 1e-5, np.float32)        # under half of 1000's ulp (6e-5)
    mean = w_g + G                          # s = w_g (start 0): G is lost here
    D2 = D.copy()
    kernels.bmuf_update(mean, w_g.copy(), D2, 0.5, 1.0, nesterov, 0.0)
    assert not D2.any()
    kernels.bmuf_update_delta(G, w_g, D, 0.5, 1.0, 0.5 if nesterov else None)
    assert np.array_equal(D, np.full(8, 1e-5, np.float32))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("look", [0.5, None])
def test_bmuf_apply_gives_the_separate_passes_bits(shape, look):
    w, w_g, D = arrays(shape, np.float32, 3)
    D.flat[:2] = [np.inf, -0.0][:D.size]
    want_g = w_g + D
    want_w = want_g.copy() if look is None else want_g + D * np.float32(look)
    kernels.bmuf_apply(w, w_g, D, look)
    assert bits(w_g) == bits(want_g) and bits(w) == bits(want_w)


@pytest.mark.parametrize("shape", SHAPES)
def test_momentum_step(shape):
    x, v, d = arrays(shape, np.float64, 3)
    v_new = 0.9 * v + d
    x2, v2 = x.copy(), v.copy()
    kernels.momentum_step(x2, v2, d.copy(), 0.9, 0.1)
    np.testing.assert_allclose(v2, v_new, rtol=1e-12)
    np.testing.assert_allclose(x2, x + 0.1 * v_new, rtol=1e-12)


def test_blockwise_visits_every_element_once_in_aligned_blocks():
    a = np.zeros(50)
    b = np.arange(50.0)
    seen = []

    def fn(x, y):
        seen.append(x.size)
        x += y + 1

    kernels.blockwise(fn, a, b)
    assert seen == [7] * 7 + [1]
    assert np.array_equal(a, np.arange(50.0) + 1)


def test_delay_compensate_matches_the_formula_block_by_block():
    rng = np.random.default_rng(5)
    n = kernels.BLOCK * 2 + 17               # several blocks and a partial one
    d, x, xs = (rng.standard_normal(n) for _ in range(3))
    lam = 0.7
    expected = d - np.minimum(lam / np.mean(d * d) * d * d, 1.0) * (x - xs)
    kernels.delay_compensate(d, x, xs, lam)
    np.testing.assert_allclose(d, expected, rtol=1e-12, atol=1e-12)
    zero = np.zeros(5)
    kernels.delay_compensate(zero, np.ones(5), np.zeros(5), lam)   # no delta: no change
    assert not zero.any()

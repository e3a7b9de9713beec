"""Model builders: shapes, options, errors, and short MNIST-1D training runs."""
import time

import numpy as np
import pytest

from psgd.errors import UsageError
from psgd.nnet import (LSTM, Conv1d, Dropout, LastFrame, MaxPool1d, Splice, build_model,
                       create_optimizer)


def kinds(net):
    return [c.kind for c in net.components]


def test_default_cnn_for_mnist1d():
    net = build_model("cnn", (40,), 10)
    assert kinds(net)[:4] == ["reshape", "conv1d", "relu", "maxpool1d"]
    assert sum(isinstance(c, Conv1d) for c in net.components) == 3
    assert net.output_shape == (10,)
    x = np.random.default_rng(0).standard_normal((5, 40)).astype(np.float32)
    p = net.predict(x)
    assert p.shape == (5, 10) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)
    # (C, L) input needs no reshape
    net2 = build_model("cnn", (1, 40), 10)
    assert kinds(net2)[0] == "conv1d"
    np.testing.assert_allclose(net2.predict(x[:, None, :]), p, rtol=1e-5)


def test_cnn_size_options():
    net = build_model("cnn", (3, 32), 4, channels="8,16", kernel=3, pool=0, hidden=[20],
                      dropout=0, batchnorm=True)
    convs = [c for c in net.components if isinstance(c, Conv1d)]
    assert [(c.in_channels, c.out_channels, c.kernel) for c in convs] == [(3, 8, 3), (8, 16, 3)]
    assert not any(isinstance(c, (MaxPool1d, Dropout)) for c in net.components)
    assert "batchnorm" in kinds(net) and net.stat_buffer.size == 2 * (8 + 16)
    assert net.predict(np.zeros((2, 3, 32), np.float32)).shape == (2, 4)


def test_mlp():
    net = build_model("mlp", (40,), 10, hidden="64, 32", dropout=0.1)
    shapes = [tuple(p.shape) for p in net.params]
    assert shapes == [(64, 40), (64,), (32, 64), (32,), (10, 32), (10,)]
    assert kinds(net).count("dropout") == 2
    assert build_model("mlp", (2, 5), 3).predict(np.zeros((4, 2, 5))).shape == (4, 3)


def test_lstm_frame_classifier():
    net = build_model("lstm", (7, 6), 5, lstm_cells="8,4", context=1, stateful=True)
    assert isinstance(net.components[0], Splice)
    lstms = [c for c in net.components if isinstance(c, LSTM)]
    assert [(c.input_dim, c.cells, c.stateful) for c in lstms] == [(18, 8, True), (8, 4, True)]
    x = np.random.default_rng(1).standard_normal((3, 7, 6))
    y = np.random.default_rng(2).integers(0, 5, (3, 7))
    assert net.predict(x).shape == (3, 7, 5)
    loss = float(net.loss_and_grad(x, y))
    assert np.isfinite(loss) and np.any(net.grad_buffer.data != 0)
    net.reset_state()
    assert all(c.get_state() is None for c in lstms)


def test_lstm_sequence_classifier_on_1d_input():
    net = build_model("lstm", (12,), 3, lstm_cells=6)
    assert any(isinstance(c, LastFrame) for c in net.components)
    assert net.predict(np.zeros((4, 12))).shape == (4, 3)


def test_builder_errors():
    with pytest.raises(UsageError, match="valid: cnn, mlp, lstm"):
        build_model("resnet", (40,), 10)
    with pytest.raises(UsageError, match="does not take lstm_cells; its options: channels"):
        build_model("cnn", (40,), 10, lstm_cells=5)
    with pytest.raises(UsageError, match="hidden"):
        build_model("mlp", (40,), 10, hidden="wide")
    with pytest.raises(UsageError, match=r"cnn needs inputs \(L,\) or \(C, L\)"):
        build_model("cnn", (2, 3, 4), 10)
    with pytest.raises(UsageError, match="output must be"):
        build_model("lstm", (5, 3), 10, output="mean")
    with pytest.raises(UsageError, match="dropout"):
        build_model("mlp", (4,), 2, dropout=1.5)


@pytest.fixture(scope="module")
def mnist1d():
    data = pytest.importorskip("mnist1d.data")
    ds = data.make_dataset(data.get_dataset_args())
    mean, std = ds["x"].mean(), ds["x"].std()
    scale = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return scale(ds["x"]), ds["y"], scale(ds["x_test"]), ds["y_test"]


def train(net, opt, data, epochs, batch=64, seed=0):
    x, y, xt, yt = data
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        perm = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            net.loss_and_grad(x[idx], y[idx])
            opt.step(net.param_buffer.data, net.grad_buffer.data)
    return net.evaluate(xt, yt)


@pytest.mark.timeout(300)
def test_cnn_learns_mnist1d(mnist1d):
    # the full run (60 s, one core) reaches ~96%; 7 epochs (~88%) take ~3 s
    start = time.perf_counter()
    loss, acc = train(build_model("cnn", (40,), 10, seed=0), create_optimizer("adam"),
                      mnist1d, epochs=7)
    print("cnn: 7 epochs, %.1fs, test acc %.3f" % (time.perf_counter() - start, acc))
    assert acc > 0.8


@pytest.mark.timeout(300)
def test_mlp_learns_mnist1d(mnist1d):
    loss, acc = train(build_model("mlp", (40,), 10, seed=0), create_optimizer("adam"),
                      mnist1d, epochs=15)
    assert acc > 0.55

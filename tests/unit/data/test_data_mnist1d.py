import os
import random
import sys

import numpy as np
import pytest

from psgd.data import mnist1d as mod
from psgd.data.mnist1d import cache_path, load_mnist1d
from psgd.errors import UsageError

pytest.importorskip("mnist1d")


def test_generates_split_standardises_and_caches(tmp_path, monkeypatch):
    d = load_mnist1d(num_samples=100, seed=3, cache_dir=str(tmp_path))
    assert d.x_train.shape == (80, 1, 40) and d.x_test.shape == (20, 1, 40)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert d.input_shape == (1, 40) and d.num_classes == 10
    assert abs(float(d.x_train.mean())) < 1e-5 and abs(float(d.x_train.std()) - 1) < 1e-4
    assert set(np.unique(np.concatenate([d.y_train, d.y_test]))) <= set(range(10))
    assert os.path.exists(cache_path(100, 3, str(tmp_path)))
    assert [p for p in os.listdir(tmp_path) if p.startswith(".tmp")] == []

    # The second load must come from the cache, not the generator.
    def no_generation(*a):
        raise AssertionError("regenerated instead of reading the cache")
    monkeypatch.setattr(mod, "_generate", no_generation)
    again = load_mnist1d(num_samples=100, seed=3, cache_dir=str(tmp_path))
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(d, name), getattr(again, name))


def test_seed_changes_data_and_keeps_caller_rng(tmp_path):
    np.random.seed(123)
    random.seed(123)
    expect_np, expect_py = np.random.random(), random.random()
    np.random.seed(123)
    random.seed(123)
    a = load_mnist1d(num_samples=20, seed=1, cache_dir=str(tmp_path))
    assert np.random.random() == expect_np and random.random() == expect_py
    b = load_mnist1d(num_samples=20, seed=2, cache_dir=str(tmp_path))
    assert not np.array_equal(a.x_train, b.x_train)
    assert len(os.listdir(tmp_path)) == 2


def test_cache_dir_from_environment(tmp_path, setting):
    setting("PSGD_CACHE_DIR", str(tmp_path / "env"))
    load_mnist1d(num_samples=20, seed=0)
    assert os.listdir(tmp_path / "env") == [os.path.basename(cache_path(20, 0))]


def test_corrupt_cache_is_regenerated(tmp_path):
    path = cache_path(20, 0, str(tmp_path))
    good = load_mnist1d(num_samples=20, seed=0, cache_dir=str(tmp_path))
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.warns(UserWarning, match="unreadable cache"):
        again = load_mnist1d(num_samples=20, seed=0, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(good.x_train, again.x_train)


@pytest.mark.parametrize("n", [0, 9, -5, 12.5, "100"])
def test_too_few_samples(n, tmp_path):
    with pytest.raises(UsageError, match="num_samples"):
        load_mnist1d(num_samples=n, cache_dir=str(tmp_path))


def test_missing_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mnist1d", None)
    monkeypatch.setitem(sys.modules, "mnist1d.data", None)
    with pytest.raises(UsageError, match="pip install mnist1d"):
        load_mnist1d(num_samples=20, cache_dir=str(tmp_path))


def test_shard_splits_train_keeps_test(tmp_path):
    d = load_mnist1d(num_samples=30, seed=0, cache_dir=str(tmp_path))
    parts = [d.shard(r, 4) for r in range(4)]
    assert [p.num_train for p in parts] == [6, 6, 6, 6]
    np.testing.assert_array_equal(np.concatenate([p.y_train for p in parts]), d.y_train)
    assert all(p.num_test == d.num_test for p in parts)
    assert sum(d.shard(r, 4, test=True).num_test for r in range(4)) == d.num_test

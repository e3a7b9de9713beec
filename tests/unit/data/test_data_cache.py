import os
import threading

import numpy as np
import pytest

from psgd.data.cache import load_arrays, save_arrays


def test_round_trip_without_pickle(tmp_path):
    path = str(tmp_path / "sub" / "a.npz")
    arrays = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.array([1, 2])}
    assert save_arrays(path, arrays)
    got = load_arrays(path)
    assert set(got) == {"x", "y"}
    np.testing.assert_array_equal(got["x"], arrays["x"])
    assert got["x"].dtype == np.float32


def test_missing_file_is_a_miss(tmp_path):
    assert load_arrays(str(tmp_path / "none.npz")) is None


def test_concurrent_writers_leave_one_whole_file(tmp_path):
    path = str(tmp_path / "c.npz")
    big = {"x": np.random.default_rng(0).normal(size=(200, 500))}
    threads = [threading.Thread(target=save_arrays, args=(path, big)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(load_arrays(path)["x"], big["x"])
    assert os.listdir(tmp_path) == ["c.npz"]


def test_unwritable_directory_only_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="could not write cache"):
        assert not save_arrays(str(blocker / "x.npz"), {"x": np.zeros(2)})

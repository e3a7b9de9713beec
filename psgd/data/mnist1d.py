"""MNIST-1D (Greydanus 2020), generated locally by the `mnist1d` package.

Nothing is downloaded: the package's generator is run with the requested
size and seed, and the result is cached as .npz so later runs (and the other
ranks of a node) skip the few seconds of generation.
"""
import os
import random

import numpy as np

from psgd.data.cache import default_cache_dir, load_arrays, save_arrays
from psgd.data.dataset import Dataset
from psgd.errors import UsageError

MIN_SAMPLES = 10        # the generator makes num_samples // 10 examples per digit
NUM_CLASSES = 10
CACHE_VERSION = 1       # bump when the preprocessing below changes


def cache_path(num_samples, seed, cache_dir=None):
    name = "mnist1d-v%d-n%d-s%d.npz" % (CACHE_VERSION, num_samples, seed)
    return os.path.join(cache_dir or default_cache_dir(), name)


def _generate(num_samples, seed):
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError:
        raise UsageError("MNIST-1D needs the mnist1d package: pip install mnist1d") from None
    args = get_dataset_args()
    args.num_samples = num_samples
    args.seed = seed
    # make_dataset reseeds the global RNGs; keep the caller's streams intact.
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    x_train, x_test = d["x"], d["x_test"]
    # One scalar mean/std from the train set: per-position statistics would
    # break the translation equivariance the CNN relies on.
    mean, std = x_train.mean(), x_train.std()
    return {
        "x_train": ((x_train - mean) / std).astype(np.float32)[:, None, :],
        "y_train": np.asarray(d["y"], dtype=np.int64),
        "x_test": ((x_test - mean) / std).astype(np.float32)[:, None, :],
        "y_test": np.asarray(d["y_test"], dtype=np.int64),
    }


def load_mnist1d(num_samples=5000, seed=42, cache_dir=None):
    """MNIST-1D with the package's 80/20 split (4000/1000 for 5000 samples).

    x_* are float32 (N, 1, 40), standardised with the train set's mean and
    std; y_* int64 digits. num_samples is rounded down to a multiple of 10.
    """
    if isinstance(num_samples, bool) or int(num_samples) != num_samples \
            or num_samples < MIN_SAMPLES:
        raise UsageError("MNIST-1D needs num_samples >= %d, got %r" % (MIN_SAMPLES, num_samples))
    if isinstance(seed, bool) or int(seed) != seed:
        raise UsageError("MNIST-1D seed must be an integer, got %r" % (seed,))
    num_samples, seed = int(num_samples), int(seed)
    path = cache_path(num_samples, seed, cache_dir)
    arrays = load_arrays(path)
    if arrays is None or set(arrays) != {"x_train", "y_train", "x_test", "y_test"}:
        arrays = _generate(num_samples, seed)
        save_arrays(path, arrays)
    return Dataset(
        x_train=arrays["x_train"], y_train=arrays["y_train"],
        x_test=arrays["x_test"], y_test=arrays["y_test"],
        num_classes=NUM_CLASSES, input_shape=tuple(arrays["x_train"].shape[1:]),
        name="mnist1d-n%d-s%d" % (num_samples, seed))

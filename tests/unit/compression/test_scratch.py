"""A quantizer keeps its block-sized scratch between calls: reusing it
across sizes, dtypes and threads changes no byte."""
import threading

import numpy as np
import pytest

from psgd.compression import quantizer


def run(q, u):
    wire, residual = np.zeros(q.nbytes(u.size), np.uint8), u.copy()
    q.encode(residual, wire)
    decoded = np.full_like(u, 3.0)
    q.decode(wire, decoded, add=True)
    return wire, residual, decoded


def same(a, b):
    return all((x.view(np.uint8) == y.view(np.uint8)).all() for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["fp16", "bf16", "1bit"])
def test_one_instance_gives_what_fresh_ones_give(kind):
    rng = np.random.default_rng(3)
    inputs = [(rng.standard_normal(n) * s).astype(d) for n, s, d in
              [(300001, 1.0, np.float32), (1037, 1e-5, np.float32), (70000, 1e-3, np.float64),
               (5, 1.0, np.float32)]]
    q = quantizer(kind, 100)
    for u in inputs:
        assert same(run(q, u), run(quantizer(kind, 100), u))


@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_threads_do_not_share_scratch(kind):
    rng = np.random.default_rng(4)
    inputs = [(rng.standard_normal(400000) * 1e-4).astype(np.float32) for _ in range(4)]
    expected = [run(quantizer(kind), u) for u in inputs]
    q, results = quantizer(kind), {}

    def work(i):
        for _ in range(3):
            results[i] = run(q, inputs[i])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same(results[i], expected[i]) for i in range(4))

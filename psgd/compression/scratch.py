"""Block-sized scratch arrays a quantizer keeps between calls.

A sync encodes and decodes every stripe, each call a few blocks long:
arrays allocated per call were fresh pages to fault in each time (at 1e5
elements that cost more than the passes). Kept per thread, since psgd's
transfer thread and the training thread may both quantize.
"""
import threading

import numpy as np


class Scratch:
    def __init__(self, size):
        self.size = size
        self._local = threading.local()

    def get(self, name, n, dtype, rows=None):
        """Array `name` of dtype cut to its first n (at most size) elements,
        or to its first n columns of `rows` rows."""
        arrays = self._local.__dict__.setdefault("arrays", {})
        key = name, np.dtype(dtype), rows
        if key not in arrays:
            arrays[key] = np.empty(self.size if rows is None else (rows, self.size), dtype)
        return arrays[key][..., :n]

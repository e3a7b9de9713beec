"""The sample count n_k a rank passes to synchronize (or syncgrad's step),
checked the same way by every algorithm that sums or sends it."""
import numbers

import numpy as np

INT64_MAX = 2 ** 63 - 1


def check_count(n_k, ranks=1):
    """(count, None) or (0, problem text) for a bad sample count. The counts
    are summed in int64 over `ranks` ranks: each must be at most
    INT64_MAX // ranks, or the sum could wrap and turn the weights negative."""
    if isinstance(n_k, (bool, np.bool_)) or not isinstance(n_k, numbers.Integral) or n_k < 0:
        return 0, "synchronize(n_k): n_k must be a non-negative integer, got %r" % (n_k,)
    if n_k > INT64_MAX // ranks:
        return 0, ("synchronize(n_k): n_k = %d is too large: the sum over %d ranks must fit "
                   "in int64 (n_k <= %d)" % (n_k, ranks, INT64_MAX // ranks))
    return int(n_k), None

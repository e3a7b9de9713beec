"""psgd.train.train from Python inside an MPI job (what a user's own script does)."""
import pytest

import psgd.train
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

SMALL = dict(model="mlp", hidden="16", num_samples=500, epochs=2, quiet=True,
             stall_timeout=30.0)


@pytest.mark.parametrize("algo", ["bmuf", "easgd"])
def test_train_returns_the_last_epochs_metrics_on_every_rank(comm, algo):
    row = psgd.train.train(comm=comm, algo=algo, **SMALL)
    assert row["epoch"] == 2 and row["samples"] == 2 * 400
    assert 0.0 <= row["test_accuracy"] <= 1.0
    total = comm.allreduce(row["test_accuracy"])
    assert total == pytest.approx(comm.size * row["test_accuracy"])  # the same on every rank


def test_bad_options_are_usage_errors_before_any_mpi(comm):
    with pytest.raises(UsageError, match="unknown trainer option 'epoch'"):
        psgd.train.train(comm=comm, epoch=3)
    with pytest.raises(UsageError, match="--alpha does not apply to --algo bsp"):
        psgd.train.train(comm=comm, algo="bsp", alpha=0.5)

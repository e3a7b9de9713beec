"""psgd.train.train from Python inside an MPI job (what a user's own script does)."""
import numpy as np
import pytest

import psgd.train
from psgd import agreement
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

SMALL = dict(model="mlp", hidden="16", num_samples=500, epochs=2, quiet=True,
             stall_timeout=30.0)


@pytest.mark.parametrize("algo", ["bmuf", "easgd"])
def test_train_returns_the_last_epochs_metrics_on_every_rank(comm, algo, tmp_path):
    out = str(tmp_path / "model.npz")
    out = agreement._bcast_text(comm, out, 0)                 # one path: rank 0 writes it
    row = psgd.train.train(comm=comm, algo=algo, out=out, **SMALL)
    assert row["epoch"] == 2 and row["samples"] == 2 * 400
    mine = np.array([row["test_loss"], row["test_accuracy"]])
    everyone = np.empty((comm.size, 2))
    comm.Allgather(mine, everyone)
    assert (everyone == everyone[0]).all()               # the same on every rank
    # the numbers are those of the model the run wrote: evaluate it afresh
    again = psgd.train.train(comm=comm, cross_validate=True, init=out,
                             **dict(SMALL, epochs=1))
    assert row["test_loss"] == pytest.approx(again["test_loss"], rel=1e-9)
    assert row["test_accuracy"] == pytest.approx(again["test_accuracy"], abs=1e-12)


def test_bad_options_are_usage_errors_before_any_mpi(comm):
    with pytest.raises(UsageError, match="unknown trainer option 'epoch'"):
        psgd.train.train(comm=comm, epoch=3)
    with pytest.raises(UsageError, match="--alpha does not apply to --algo bsp"):
        psgd.train.train(comm=comm, algo="bsp", alpha=0.5)

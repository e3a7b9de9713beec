"""A short training run with the model on a device (simulated, or a GPU):
the nnet, the optimizer and the sync path all on the device backend."""
import pytest

import psgd.train
from psgd import mpi

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(300)]

# No dropout: a GPU draws its masks from CuPy's generator, not NumPy's, so
# with dropout the two runs differ by more than rounding (1.5% in train loss
# on an H200).
SMALL = dict(model="mlp", hidden="16", dropout=0.0, num_samples=400, epochs=1, quiet=True,
             stall_timeout=120.0, backend="cupy")


@pytest.mark.parametrize("algo,flags", [("bmuf", {}), ("easgd", {}),
                                        ("bmuf", {"compression": "1bit"})],
                         ids=["bmuf", "easgd", "bmuf-1bit"])
def test_training_on_device_matches_the_host_run(comm, xp, algo, flags):
    simulated = getattr(xp, "device", None)
    launched = simulated.issued() if simulated else None
    direct = "yes" if mpi.cuda_aware() else "no"       # the path the fixture chose
    on_device = psgd.train.train(comm=comm, algo=algo, cuda_aware=direct, **SMALL, **flags)
    assert mpi.cuda_aware() == (direct == "yes")
    if launched is not None:        # the simulated device (this rank's GPU) did the work
        assert simulated.issued() > launched + 20
    on_host = psgd.train.train(comm=comm, algo=algo, **dict(SMALL, backend="numpy"), **flags)
    assert on_device["samples"] == on_host["samples"] == 320
    assert on_device["test_accuracy"] == pytest.approx(on_host["test_accuracy"], abs=0.02)
    # bmuf is deterministic; easgd's service order (so its model) varies run to run
    tolerance = 1e-5 if algo == "bmuf" else 1e-2
    assert on_device["train_loss"] == pytest.approx(on_host["train_loss"], rel=tolerance)


def test_the_exchange_path_is_logged_once_at_start_up(comm, xp, capsys):
    logged = []
    for setting in ("no", "auto"):      # both runs first: an assert must not strand a rank
        psgd.train.train(comm=comm, algo="bsp", **dict(SMALL, quiet=False, cuda_aware=setting))
        logged.append([l for l in capsys.readouterr().out.splitlines() if "exchange:" in l])
    if comm.rank != 0:
        assert logged == [[], []]
        return
    forced, auto = logged
    assert len(forced) == 1 and forced[0].startswith("LOG "), forced
    assert forced[0].endswith("exchange: staged through pinned host memory (MPI is not "
                              "CUDA-aware: forced by --cuda-aware no)"), forced
    assert len(auto) == 1 and ("MPIX_Query_cuda_support() = " in auto[0]
                               or "no usable MPIX_Query" in auto[0]), auto

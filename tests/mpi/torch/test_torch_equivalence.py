"""For every algorithm, a torch model driven by psgd.torch (its optimizer,
autograd, .grad) ends with the same parameters, on every rank, as the NumPy
API driven with the same steps on the same numbers (docs/algorithms.md, to 1e-6).
The server algorithms take turns (worker 1, 2, ... each step) so the
server's order, and with it the center, is the same in both runs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_drive import (drive, grad_step_numpy, grad_step_torch,  # noqa: E402
                         model_step_numpy, model_step_torch)

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod", "easgd", "asgd", "masgd"])
def test_model_averaging_matches_numpy(comm, name):
    got, expected = drive(comm, name, model_step_torch, model_step_numpy)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("zero_to_none", [True, False])
def test_syncgrad_matches_numpy(comm, zero_to_none):
    """Whether zero_grad() drops .grad (re-adopted) or zeroes it in place."""
    got, expected = drive(comm, "syncgrad", grad_step_torch, grad_step_numpy,
                          zero_to_none=zero_to_none)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    all_ranks = np.empty((comm.size, got.size), dtype=got.dtype)
    comm.Allgather(got, all_ranks)
    assert (all_ranks == all_ranks[0]).all()

"""examples/torch_mnist1d.py as a user runs it: a whole mpirun job, a
collective and a server algorithm, a few epochs each."""
import re

import pytest

from launch_util import mpirun

pytest.importorskip("torch")
# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]


# sod: psgd.torch's options and block by N (75.6% here after 4 epochs;
# psgd.create's own, a sync every 4 steps, 59.7%)
@pytest.mark.parametrize("algo, epochs, floor", [
    ("syncgrad", 2, 50.0), ("sod", 4, 70.0), ("easgd", 2, 50.0)])
def test_torch_example_trains(algo, epochs, floor):
    result = mpirun(3, ["examples/torch_mnist1d.py", "--algo", algo, "--epochs", str(epochs)],
                    timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    line = re.search(r"%s np 3: held-out accuracy ([0-9.]+)%%" % algo, result.stdout)
    assert line, result.stdout
    assert float(line.group(1)) > floor     # well past chance (10%)


def test_torch_example_rejects_an_unknown_algorithm():
    result = mpirun(2, ["examples/torch_mnist1d.py", "--algo", "nope"], timeout=120)
    assert result.returncode != 0 and "invalid choice" in result.stderr

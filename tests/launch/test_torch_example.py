"""examples/torch_mnist1d.py as a user runs it: a whole mpirun job, a
collective and a server algorithm, one epoch each."""
import re

import pytest

from launch_util import mpirun

pytest.importorskip("torch")
# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]


@pytest.mark.parametrize("algo", ["syncgrad", "easgd"])
def test_torch_example_trains(algo):
    result = mpirun(3, ["examples/torch_mnist1d.py", "--algo", algo, "--epochs", "2"],
                    timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    line = re.search(r"%s np 3: held-out accuracy ([0-9.]+)%%" % algo, result.stdout)
    assert line, result.stdout
    assert float(line.group(1)) > 50.0     # two epochs: well past chance (10%)


def test_torch_example_rejects_an_unknown_algorithm():
    result = mpirun(2, ["examples/torch_mnist1d.py", "--algo", "nope"], timeout=120)
    assert result.returncode != 0 and "invalid choice" in result.stderr

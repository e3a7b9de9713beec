"""psgd.agreement.abort_on_error: how a failing job ends. A lone failure
waits its grace so that its line reaches the launcher (tests/launch/
test_faults.py and test_hostile_api*.py end jobs that way); an error every
rank raises ends the job once every rank's line is out."""
import subprocess

import pytest

from launch_util import python_job

pytestmark = pytest.mark.timeout(120)

EVERY_RANK = """
from psgd.errors import CollectiveUsageError
agreement.ABORT_GRACE = 60      # what a job that waited it out would take
raise CollectiveUsageError("rank %d: the same bad input on every rank" % MPI.COMM_WORLD.rank)
"""


@pytest.mark.parametrize("np_", [2, 5])
def test_an_error_every_rank_raises_ends_the_job_once_every_line_is_out(np_):
    try:
        result = python_job(np_, EVERY_RANK, timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("the job waited out its grace: rank 0 did not hear that every line was out")
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = sorted(line for line in result.stderr.splitlines() if line.startswith("psgd:"))
    assert lines == ["psgd: error: rank %d: the same bad input on every rank" % r
                     for r in range(np_)], result.stderr

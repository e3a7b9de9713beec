"""Fixtures of the whole-job tests."""
import os
import shutil

import pytest

from launch_util import ROOT


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """tests/fault_driver.py, copied out of the repository for the job to run."""
    path = str(tmp_path_factory.mktemp("driver") / "fault_driver.py")
    shutil.copy(os.path.join(ROOT, "tests", "fault_driver.py"), path)
    return path

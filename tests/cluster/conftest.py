"""Cluster tests: jobs across namespace hosts (tests/cluster_util.py)."""
import pathlib
import re
import shutil

import pytest

from cluster_util import cluster_fixture, shared_dir


@pytest.fixture(scope="module")
def cluster():
    """Two hosts with 1 Gb/s links, for every test of the module."""
    yield from cluster_fixture(2, "1gbit")


@pytest.fixture
def fresh_cluster():
    """Two hosts of the test's own, for tests that break one."""
    yield from cluster_fixture(2, "1gbit")


@pytest.fixture
def workdir(request):
    """tmp_path for cluster jobs: a folder on the filesystem every host shares."""
    path = shared_dir(re.sub(r"[^\w.-]", "_", request.node.name)[:80])
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)

"""The straggler, named across namespace hosts: with one host's link slowed
(bin/psgd-local-cluster slow), the end of the log names that host's rank as
the one the others waited for, and the --timeline trace has a track per host,
on one clock."""
import json
import re
import subprocess

import pytest

from cluster_util import Cluster, skip_without_cluster

pytestmark = pytest.mark.timeout(300)


# The server (rank 0) and a worker on h0, a worker on each of h1 and h2: the
# server's time with h1's worker crawls over the slow link while the others
# wait for their turn, and h1's worker ends each epoch last.
@pytest.mark.one_mpi
def test_the_host_with_a_slow_link_is_named(workdir):
    skip_without_cluster()
    cluster = Cluster(3, "1gbit")
    try:
        cluster.slow("h1", "10mbit")
        train = ["-m", "psgd.worker", "--algo", "easgd", "--model", "mlp", "--hidden", "1024",
                 "--num-samples", "2000", "--epochs", "2", "--timeline", "t.json"]
        cmd = cluster.mpirun_command(1, 4, train)
        hosts = cmd.index("-hosts") if "-hosts" in cmd else cmd.index("--host")
        cmd[hosts + 1] = "h0:2,h1:1,h2:1"
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                                env=cluster.job_env(), cwd=str(workdir),
                                stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr[-3000:]
        named = re.findall(r"straggler: .*", result.stdout + result.stderr)
        assert len(named) == 1 and named[0].startswith("straggler: rank 2 on h1;"), \
            result.stderr[-3000:]
        with open(workdir / "t.json") as f:
            events = json.load(f)["traceEvents"]
        hosts = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
        assert hosts == ["host h0", "host h0", "host h1", "host h2"], hosts
        # one clock: the epoch's ends overlap across hosts
        ends = [e for e in events if e["name"].startswith("epoch end")
                and e["args"]["epoch"] == 0]
        assert max(e["ts"] for e in ends) <= min(e["ts"] + e["dur"] for e in ends) + 1e4
    finally:
        cluster.down()

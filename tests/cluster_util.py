"""Jobs across namespace hosts (bin/psgd-local-cluster) from plain pytest:
a cluster brought up for a module or a test and always taken down, even
when the test fails; the skip reason where namespaces cannot be made."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from launch_util import ROOT, job_env, PopenJob, run_job

TOOL = os.path.join(ROOT, "bin", "psgd-local-cluster")
LAUNCHER = os.path.join(os.path.dirname(sys.executable), "mpirun")
_why_not = []


def why_no_cluster():
    """None where namespace hosts can be made here, else the reason."""
    if not _why_not:
        _why_not.append(_probe())
    return _why_not[0]


def _probe():
    if sys.platform != "linux":
        return "namespace hosts need Linux"
    if os.geteuid() != 0:
        return "namespace hosts need root (ip netns, unshare); run the suite as root"
    for tool in ("ip", "tc", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return "%s is not installed (iproute2, util-linux)" % tool
    if not os.path.exists(LAUNCHER):
        return "no mpirun beside python"
    for what, path in (("the repository", ROOT), ("python", sys.prefix)):
        if os.path.realpath(path).startswith("/tmp/"):
            return ("%s is under /tmp (%s), which every namespace host replaces with its "
                    "own: clone elsewhere to run the cluster tests" % (what, path))
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount", "--uts", "--ipc",
                            "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot make namespaces here: %s" % probe.stderr.strip()
    return None


def skip_without_cluster():
    reason = why_no_cluster()
    if reason:
        pytest.skip(reason)


class Cluster:
    """A running cluster: hosts h0..h{H-1}, and the ways to use and break them."""

    def __init__(self, hosts, rate=None, slurm=False):
        self.names = ["h%d" % i for i in range(hosts)]
        # a cluster of the suite's own: one a user has up is left alone
        # (PSGD_TEST_CLUSTER names it where several suites share a machine)
        self.env = {"PSGD_LOCAL_CLUSTER": os.environ.get("PSGD_TEST_CLUSTER", "test")}
        # a test killed before its clean-up left one behind
        self.tool("down", check=False)
        self.tool("up", str(hosts), *(["--rate", rate] if rate else []),
                  *(["--slurm"] if slurm else []))

    def tool(self, *args, check=True, timeout=120):
        result = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True,
                                text=True, timeout=timeout, env=dict(os.environ, **self.env),
                                stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise AssertionError("psgd-local-cluster %s: %s" % (" ".join(args), result.stderr))
        return result

    def down(self):
        self.tool("down", check=False)

    def kill(self, host):
        self.tool("kill", host)

    def cut(self, host):
        self.tool("cut", host)

    def slow(self, host, rate):
        self.tool("slow", host, rate)

    def counters(self):
        """{host: (bytes sent, bytes received)} of each host's interface."""
        out = self.tool("status").stdout
        return {line.split()[0]: (int(line.split("sent ")[1].split()[0]),
                                  int(line.split("received ")[1].split()[0]))
                for line in out.splitlines() if line.strip()}

    def mpirun_command(self, per_host, np_, argv, order="block"):
        """`psgd-local-cluster mpirun` of NP ranks running `python ARGV...`,
        PER_HOST on each host: ranks 0.. fill h0 first ("block"), or go
        round the hosts ("round": h0, h1, h0, h1...)."""
        hosts = ",".join("%s:%d" % (h, per_host) for h in self.names)
        if _open_mpi():
            # the suite's default policy (":oversubscribe", launch_util) alone
            # put every rank on h0
            placement = ["--host", hosts, "--map-by", "%s:oversubscribe" % (
                "node" if order == "round" else "slot")]
        else:
            placement = ["-hosts", hosts if order == "block" else
                         ",".join("%s:1" % h for h in self.names)]
        return ([sys.executable, TOOL, "mpirun"] + placement + ["-n", str(np_)]
                + [sys.executable] + list(argv))

    def job_env(self, env=None):
        return dict(job_env(env), MPIEXEC=LAUNCHER, OMP_NUM_THREADS="1", **self.env)

    def mpirun(self, per_host, np_, argv, order="block", timeout=180, env=None, cwd=None):
        return run_job(self.mpirun_command(per_host, np_, argv, order), timeout,
                       self.job_env(env), cwd or ROOT)

    def start_mpirun(self, per_host, np_, argv, stdout, stderr, order="block", env=None,
                     cwd=None):
        return PopenJob(self.mpirun_command(per_host, np_, argv, order), stdout=stdout,
                         stderr=stderr, env=self.job_env(env), cwd=cwd or ROOT,
                         stdin=subprocess.DEVNULL, start_new_session=True)

    def processes(self, host, pattern=""):
        """Command lines of the live processes on `host` that match `pattern`."""
        out = self.tool("exec", host, "ps", "-eo", "stat=,args=").stdout
        return [line.split(None, 1)[1] for line in out.splitlines()
                if pattern in line and not line.lstrip().startswith("Z") and "ps -eo" not in line]

    def ranks(self, host, module="psgd.worker"):
        """Command lines of the Python processes on `host` running `module`
        (its ranks, not the launcher whose arguments name it)."""
        return [p for p in self.processes(host, module)
                if os.path.basename(p.split()[0]).startswith("python")]


def _open_mpi():
    from launch_util import _mpi_flavour
    return "Open MPI" in _mpi_flavour()


SLURM_PACKAGES = ("slurm-wlm", "munge")
SLURM_DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch")


def why_no_slurm():
    """None once SLURM's daemons are installed (through apt where they are
    missing and apt is there), else the reason."""
    if all(shutil.which(d) for d in SLURM_DAEMONS):
        return None
    if shutil.which("apt-get") is None:
        return "SLURM is not installed and there is no apt-get to install %s" % (
            " and ".join(SLURM_PACKAGES))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq"] + list(SLURM_PACKAGES)):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            return "could not install SLURM (%s): %s" % (" ".join(cmd), r.stderr.strip()[-300:])
    missing = [d for d in SLURM_DAEMONS if not shutil.which(d)]
    return "SLURM installed without %s" % ", ".join(missing) if missing else None


def cluster_fixture(hosts=2, rate="1gbit", slurm=False):
    """A pytest fixture body: the cluster, then `down` whatever happened."""
    skip_without_cluster()
    if slurm and why_no_slurm():
        pytest.skip(why_no_slurm())
    cluster = Cluster(hosts, rate, slurm)
    try:
        yield cluster
    finally:
        cluster.down()


def shared_dir(name):
    """A fresh folder every host sees (each host's /tmp is its own, as on a
    real cluster: pytest's tmp_path is out of their sight)."""
    path = os.path.join(ROOT, ".cache", "cluster-work", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


_SERVER_PIECES = """
import numpy as np
from mpi4py import MPI
import psgd
from psgd import mpi

received = []
original = mpi.Exchange.irecv_part
def counting(exchange, source, lo, hi, *args, **kwargs):
    received.append(hi - lo)
    return original(exchange, source, lo, hi, *args, **kwargs)
mpi.Exchange.irecv_part = counting

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
piece = %(piece)d
n = 3 * piece + 1234                        # four pieces: three whole and a remainder
sync = psgd.create("asgd", [np.zeros(n, np.float32)], %(options)s)
assert mpi.spans_hosts(comm) and sync.piece == piece, sync.piece
if sync.role == "server":
    stats = sync.run()
    # integer-valued deltas: the center is their sum in any order
    expected = sum((np.arange(n, dtype=np.float32) %% 89) * k for k in range(1, size))
    assert np.array_equal(sync.params[0], expected), np.abs(sync.params[0] - expected).max()
    assert received == [piece, piece, piece, 1234] * stats.syncs, received[:8]
    print("PIECES-OK", stats.syncs, "syncs of", len(received) // stats.syncs, "pieces")
else:
    sync.params[0][:] = (np.arange(n, dtype=np.float32) %% 89) * rank
    sync.synchronize(1)
    sync.stop()
sync.close()
"""


def server_pieces_job(piece, **options):
    """`python -c` text of an asgd job across hosts (its server on one, workers
    on every host) that checks its model messages arrive in pieces of `piece`
    elements and that the center is the sum of the deltas; it prints
    "PIECES-OK <syncs> syncs of 4 pieces"."""
    return _SERVER_PIECES % {"piece": piece, "options": ", ".join(
        "%s=%r" % kv for kv in sorted(options.items()))}


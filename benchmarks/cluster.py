"""The cluster regime: benchmark jobs across namespace hosts of
bin/psgd-local-cluster (each host its own network stack, IPC and /dev/shm,
its link shaped with tbf), so MPI sends between hosts over a link that is
slow and separate from the ranks' CPU, as between machines.

The benchmarks bring up a cluster of their own (PSGD_LOCAL_CLUSTER, default bench,
apart from the tests' `test` cluster and a user's `main`) and always take it
down, also when a job fails (`hosts()` is a context manager). Needs root;
elsewhere the cluster sections say why they did not run.
"""
import contextlib
import os
import shutil
import subprocess
import sys

import common

NAME = os.environ.get("PSGD_LOCAL_CLUSTER") or "bench"   # the tool's own variable
TOOL = os.path.join(common.ROOT, "bin", "psgd-local-cluster")
RATES = ("1gbit", "10gbit")
LAYOUTS = ((2, 1), (2, 2))          # (hosts, ranks per host)
RATE_BITS = {"1gbit": 1e9, "10gbit": 1e10}

NOTE = (
    "Cluster regime: namespace hosts of `bin/psgd-local-cluster` on this one machine "
    "(each host its own network stack, IPC, PID namespace and `/dev/shm`, so MPI uses "
    "shared memory inside a host and the network between hosts, as on a real cluster), "
    "each host's link shaped to the stated rate in both directions (tbf). What this "
    "cannot show: every host runs on the same 2 cores, so compute does not speed up "
    "beyond 2 ranks (2 hosts x 2 ranks is 4 ranks on 2 cores), and the links' TCP is "
    "still this machine's CPU work (a NIC would offload it). The link rates and what "
    "the algorithms send over them are real; the compute beside them is not a "
    "cluster's.")


def why_not():
    """None where the cluster can be brought up here, else the reason."""
    if os.geteuid() != 0:
        return "namespace hosts need root (ip netns, unshare)"
    for tool in ("ip", "tc", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return "%s is not installed" % tool
    if common.mpi_flavour() != "mpich":
        return "the cluster regime launches through MPICH's hydra (-hosts); this is Open MPI"
    return None


def _env(extra=None):
    env = dict(os.environ, PSGD_LOCAL_CLUSTER=NAME,
               MPIEXEC=os.path.join(os.path.dirname(sys.executable), "mpiexec"))
    env.update(extra or {})
    return env


def tool(*args, timeout=120):
    result = subprocess.run([sys.executable, TOOL] + [str(a) for a in args],
                            capture_output=True, text=True, timeout=timeout, env=_env(),
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError("psgd-local-cluster %s: %s" % (" ".join(map(str, args)),
                                                          result.stderr.strip()))
    return result.stdout


@contextlib.contextmanager
def hosts(count, rate):
    """`count` hosts at `rate` each, down again however the block ends."""
    tool("down")               # whatever a killed benchmark left
    try:
        tool("up", count, "--rate", rate)
        yield
    finally:
        tool("down")


def mpi_run(placement, argv, timeout=900, env=None):
    """`python -u argv...` across the hosts; `placement` is [(host, ranks)] in
    rank order (MPICH's -hosts: ranks fill each host in turn). Returns stdout;
    a failure raises with the job's tail; past `timeout` the job is killed
    (its ranks on the other hosts then die with the cluster's `down`)."""
    spec = ",".join("%s:%d" % hp for hp in placement)
    n = sum(r for _, r in placement)
    # hydra hands the launcher's environment to every rank on every host
    cmd = [sys.executable, TOOL, "mpirun", "-hosts", spec, "-n", str(n), sys.executable,
           "-u"] + [str(a) for a in argv]
    return common.run_job(cmd, _env(common.child_env(env, pin_blas=True)), timeout,
                          "across hosts " + spec)


def run_child(script, placement, out, args=(), timeout=900, env=None):
    """`script --child --out OUT args` across the hosts; returns OUT's JSON
    (results/ is on the filesystem every host shares)."""
    import json
    if os.path.exists(out):
        os.unlink(out)
    mpi_run(placement, [os.path.join(common.HERE, script), "--child", "--out", out]
            + list(args), timeout=timeout, env=env)
    with open(out) as f:
        return json.load(f)


def layout(count, per_host):
    return [("h%d" % i, per_host) for i in range(count)]


def link_floor(nbytes, hosts_, rate):
    """Seconds a bandwidth-optimal hierarchical allreduce of `nbytes` needs at
    least: summed inside each host first, then a reduce-scatter and an
    allgather between the hosts, each host's link carrying 2 (H-1)/H of the
    buffer each way, at `rate` (bits/s). Ranks per host do not change it."""
    return 2 * (hosts_ - 1) / hosts_ * nbytes * 8 / RATE_BITS.get(rate, rate)


def skipped(title, why):
    return common.Section(title, "Not measured: %s." % why, ["%s: not measured (%s)" % (
        title, why)])

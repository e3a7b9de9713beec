"""Every algorithm through the CLI on two namespace hosts with two ranks
each (bin/psgd-local-cluster): the server on h0, and --servers 2 with one
server per host; psgd.torch; checkpoints and --resume across hosts; the
suite's own replay oracles and the pipelined sum (psgd pipelines because the
ranks span hosts) against the serial results."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from cluster_util import TOOL, json_lines, server_pieces_job
from psgd import pieces

pytestmark = pytest.mark.timeout(240)

QUICK = ["--model", "mlp", "--hidden", "128", "--epochs", "10"]
ALGORITHMS = ["bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd"]
SERVER_BASED = ("easgd", "asgd", "masgd")


def under_one_mpi(names, keep):
    """The CLI's code paths do not depend on the MPI library: under the second
    MPI one collective and one server algorithm carry its launcher and
    transport across hosts (`keep`), the rest run under one MPI (CI time)."""
    return [n if n in keep else pytest.param(n, marks=pytest.mark.one_mpi) for n in names]


def hosts_line(stderr):
    found = re.findall(r"on 2 hosts: (h\d) \(ranks ([\d, ]+)\), (h\d) \(ranks ([\d, ]+)\)", stderr)
    assert found, stderr[-3000:]
    return {h: [int(r) for r in rs.split(", ")] for h, rs in zip(found[0][::2], found[0][1::2])}


def final_accuracy(metrics):
    return json_lines(metrics)[-1]["test_accuracy"]


@pytest.mark.parametrize("algo", under_one_mpi(ALGORITHMS, keep=("bmuf", "asgd")))
def test_every_algorithm_trains_across_two_hosts(cluster, workdir, algo):
    sent_before = cluster.counters()
    r = cluster.mpirun(2, 4, ["-m", "psgd.worker", "--algo", algo, *QUICK,
                              "--metrics", str(workdir / "m.jsonl")], cwd=str(workdir))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert hosts_line(r.stdout + r.stderr) == {"h0": [0, 1], "h1": [2, 3]}
    # rank 0 (the server of a server algorithm) is on h0
    assert final_accuracy(workdir / "m.jsonl") > 0.3
    sent = {h: cluster.counters()[h][0] - sent_before[h][0] for h in ("h0", "h1")}
    # each sync of h1's ranks crosses h1's link, and there are dozens of them
    params = int(re.search(r"mlp: (\d+) params", r.stdout + r.stderr).group(1))
    assert sent["h1"] > 10 * 4 * params, sent


@pytest.mark.parametrize("algo", under_one_mpi(SERVER_BASED, keep=("asgd",)))
def test_two_servers_one_on_each_host(cluster, workdir, algo):
    r = cluster.mpirun(2, 4, ["-m", "psgd.worker", "--algo", algo, "--servers", "2", *QUICK,
                              "--metrics", str(workdir / "m.jsonl")], order="round",
                       cwd=str(workdir))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    # servers 0 and 1 on h0 and h1, a worker on each host
    assert hosts_line(r.stdout + r.stderr) == {"h0": [0, 2], "h1": [1, 3]}
    assert final_accuracy(workdir / "m.jsonl") > 0.3


def model_arrays(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "__header__"}


# files on the shared filesystem, whatever the MPI library carried the job
@pytest.mark.one_mpi
@pytest.mark.parametrize("algo", ["bmuf", "easgd"])
def test_resume_across_hosts_gives_the_uninterrupted_model(cluster, workdir, algo):
    """Checkpoints on the shared filesystem (each rank writes its own file
    from its own host); a run stopped after epoch 2 and resumed to epoch 3
    ends where one run of 3 epochs does."""
    base = ["-m", "psgd.worker", "--algo", algo, "--model", "mlp", "--hidden", "64",
            "--num-samples", "2000", "--checkpoint-dir", "ck"]
    whole = workdir / "whole"
    parts = workdir / "parts"
    whole.mkdir()
    parts.mkdir()
    r = cluster.mpirun(2, 4, base + ["--epochs", "3", "--out", "final.npz"], cwd=str(whole))
    assert r.returncode == 0, r.stderr[-3000:]
    r = cluster.mpirun(2, 4, base + ["--epochs", "2"], cwd=str(parts))
    assert r.returncode == 0, r.stderr[-3000:]
    # each of the four ranks wrote its own file, two of them from h1
    assert sorted(os.listdir(parts / "ck" / "epoch-0001")) == [
        "rank-%05d.npz" % k for k in range(4)]
    r = cluster.mpirun(2, 4, base + ["--epochs", "3", "--resume", "--out", "final.npz"],
                       cwd=str(parts))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resum" in (r.stdout + r.stderr).lower()
    a, b = model_arrays(whole / "final.npz"), model_arrays(parts / "final.npz")
    assert a.keys() == b.keys()
    if algo in SERVER_BASED:
        # the server's order of service depends on timing: close, not equal
        for k in a:
            assert np.abs(a[k] - b[k]).max() < 1.0, k
    else:
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.one_mpi
def test_the_replay_oracles_hold_across_hosts(cluster):
    """The suite's serial replays of the collective algorithms, with two of
    the four ranks on the other side of a 1 Gb/s link."""
    r = cluster.mpirun(2, 4, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi",
                              "tests/mpi/algorithms/test_collective.py"], timeout=220)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]


PIPELINED = """
import numpy as np
from mpi4py import MPI
import psgd
from psgd import mpi, pipeline, settings

calls = []
original = pipeline.pipelined_allreduce
def counting(exchange, before, after, from_end, chunk):
    calls.append((exchange.buffer.size, chunk))
    return original(exchange, before, after, from_end, chunk)
pipeline.pipelined_allreduce = counting

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
n = 3 * pipeline.ACROSS_HOSTS_CHUNK + 1234           # four chunks of the across-hosts size
# integer-valued floats: every order of the sum gives the same bits
w = np.arange(n, dtype=np.float32) % 97 + rank
sync = psgd.create("bsp", [np.zeros(n, np.float32)], weighting="uniform")
assert mpi.spans_hosts(comm)
sync.params[0][:] = w               # what each rank trained (create gave it rank 0's)
sync.synchronize(1)
expected = np.empty_like(w)
comm.Allreduce(w, expected)
expected /= size
assert calls == [(n, pipeline.ACROSS_HOSTS_CHUNK)], calls
assert np.array_equal(sync.params[0], expected), np.abs(sync.params[0] - expected).max()
sync.close()

# syncgrad: its count rides in the last chunk, which goes first
grad = psgd.create("syncgrad", [np.zeros(n, np.float32)], grads=[np.zeros(n, np.float32)])
grad.grads[0][:] = w
grad.synchronize(1 + rank)
comm.Allreduce(w * np.float32(1 + rank), expected)
expected /= np.float32(sum(1 + k for k in range(size)))
assert [size for size, _ in calls] == [n, n + 2], calls
assert np.array_equal(grad.grads[0], expected), np.abs(grad.grads[0] - expected).max()
grad.stop(0)
if rank == 0:
    print("PIPELINED-OK", calls)
"""


def test_ranks_on_two_hosts_pipeline_the_sum_and_get_one_calls_bits(cluster):
    r = cluster.mpirun(2, 4, ["-c", PIPELINED])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "PIPELINED-OK" in r.stdout


@pytest.mark.one_mpi
def test_server_messages_go_in_the_across_hosts_piece(cluster):
    """asgd with its server on h0 and workers on both hosts: the model
    messages go in 32k-element pieces (psgd/pieces.py), and the center is
    the sum of the deltas."""
    r = cluster.mpirun(2, 4, ["-c", server_pieces_job(pieces.ACROSS_HOSTS_PIECE)])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "PIECES-OK 3 syncs of 4 pieces" in r.stdout, r.stdout[-2000:]


EASGD_PIECES = """
import numpy as np
from mpi4py import MPI
import psgd
from psgd import mpi

steps = []                          # the piece of every blocking model exchange
original = mpi.Sendrecv
def counting(comm, send, recv, peer, *args):
    steps.append(args[1] if len(args) > 1 else None)
    return original(comm, send, recv, peer, *args)
mpi.Sendrecv = counting

rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
n = 3 * 8192 + 100                  # four 32 KiB pieces of float32
sync = psgd.create("easgd", [np.zeros(n, np.float32)], alpha=0.5)
assert sync.piece == 8192, sync.piece
if sync.role == "server":
    sync.run()
    # easgd's update, replayed in the order the server served: x += alpha (w_k - x)
    x = np.zeros(n, np.float32)
    for service in sync.log:
        x += np.float32(0.5) * ((np.arange(n, dtype=np.float32) % 89) * service.rank - x)
    assert np.allclose(sync.params[0], x), np.abs(sync.params[0] - x).max()
    assert steps and set(steps) == {8192}, steps[:8]
    print("EASGD-PIECES-OK", len(sync.log), "syncs")
else:
    sync.params[0][:] = (np.arange(n, dtype=np.float32) % 89) * rank
    sync.synchronize(1)
    sync.stop()
sync.close()
"""


@pytest.mark.one_mpi
def test_easgd_messages_across_hosts_go_in_eager_pieces(cluster):
    """easgd's server answers with one Sendrecv; across hosts it goes as
    blocking Sendrecvs of 32 KiB pieces (one 40 MB message each way took
    2.1x the link's time at 1 Gb/s, the pieces 1.07-1.11x: psgd/pieces.py),
    and the center is easgd's update replayed in the server's order."""
    r = cluster.mpirun(2, 4, ["-c", EASGD_PIECES])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "EASGD-PIECES-OK 3 syncs" in r.stdout, r.stdout[-2000:]


@pytest.mark.timeout(300)
@pytest.mark.one_mpi
def test_psgd_torch_across_two_hosts(cluster, workdir):
    pytest.importorskip("torch")
    r = cluster.mpirun(2, 4, [os.path.join("examples", "torch_mnist1d.py"), "--algo", "bmuf",
                              "--epochs", "2"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "accuracy" in r.stdout.lower(), r.stdout[-2000:]


@pytest.mark.parametrize("per_host", [1, 2])
def test_psgd_torch_syncgrad_sums_linear_layers_through_their_rows_across_hosts(
        cluster, workdir, per_host):
    """Unset, create() chooses the factors where the ranks span hosts: the
    hidden layer's sums come from the gathered rows (the output layer would
    spare too few bytes to pay for a collective), the model is the plain
    sums' to float rounding, and every replica holds the same bits."""
    pytest.importorskip("torch")
    r = cluster.mpirun(per_host, 2 * per_host, [os.path.join("tests", "torch_factors_job.py")])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("FACTORS")]
    assert line, r.stdout[-2000:] + r.stderr[-2000:]
    found = dict(kv.split("=") for kv in line[0].split()[1:])
    assert found["products"] == "[5]" and found["plain"] == "[]", line
    assert found["identical"] == "True" and float(found["maxdiff"]) < 1e-5, line


@pytest.mark.one_mpi
def test_the_readme_command_as_a_new_user_types_it(cluster, workdir):
    """`psgd-local-cluster mpirun -hosts h0:2,h1:2 -n 4 python -m psgd.worker
    --algo bmuf` with no virtualenv on PATH: the launcher and `python` are
    the repository's .venv's (the one beside this interpreter)."""
    env = cluster.job_env()
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.pop("MPIEXEC")
    r = subprocess.run([sys.executable, TOOL, "mpirun", "-hosts", "h0:2,h1:2", "-n", "4",
                        "python", "-m", "psgd.worker", "--algo", "bmuf", "--epochs", "1"],
                       capture_output=True, text=True, env=env, cwd=str(workdir), timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "on 2 hosts: h0 (ranks 0, 1), h1 (ranks 2, 3)" in r.stdout + r.stderr


TORCHRUN_JOB = """
import os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
os.write(1, ("RANK %d %d %s %d\\n" % (dist.get_rank(), dist.get_world_size(),
                                      socket.gethostname(), int(t[0]))).encode())
dist.destroy_process_group()
"""


@pytest.mark.one_mpi
def test_torchrun_on_every_host(cluster, workdir):
    """psgd-local-cluster torchrun: one torchrun per host, rendezvous at h0,
    gloo over each host's eth0 (the peer psgd.torch is measured against)."""
    pytest.importorskip("torch")
    (workdir / "job.py").write_text(TORCHRUN_JOB)
    r = subprocess.run([sys.executable, TOOL, "torchrun", "--nproc-per-node", "2",
                        str(workdir / "job.py")], capture_output=True, text=True,
                       env=cluster.job_env(), cwd=str(workdir), timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ranks = sorted(line.split()[1:] for line in r.stdout.splitlines() if line.startswith("RANK"))
    assert ranks == [["0", "4", "h0", "10"], ["1", "4", "h0", "10"],
                     ["2", "4", "h1", "10"], ["3", "4", "h1", "10"]], r.stdout


@pytest.mark.one_mpi
def test_a_host_the_cluster_lacks_is_one_line_before_any_launch(cluster, workdir):
    """`mpirun -hosts h0:1,h9:1` on a cluster of h0 and h1: the tool names
    h9 and exits 2 before the launcher starts (which would print four lines
    of its own after the tool's), in a host list and in a host file."""
    hostfile = workdir / "hosts"
    hostfile.write_text("# the job's hosts\nh0:1\nh9:1\n")
    for where in (["-hosts", "h0:1,h9:1"], ["-f", str(hostfile)]):
        r = subprocess.run([sys.executable, TOOL, "mpirun"] + where + ["-n", "2", "true"],
                           capture_output=True, text=True, env=cluster.job_env(), timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines() == [
            "psgd-local-cluster: error: no host 'h9' in this cluster (hosts: h0, h1)"], r.stderr


SOCKET_BUFFERS = """
import os, socket
import psgd                     # before MPI starts: psgd/_tcp_buffers.py
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
peer = 1 - comm.rank
out = np.empty(1 << 20, np.float32)
comm.Sendrecv(np.ones_like(out), dest=peer, recvbuf=out, source=peer)   # connected
sizes = set()                   # (send, receive) buffers of this rank's TCP sockets
for fd in os.listdir("/proc/self/fd"):
    try:
        s = socket.socket(fileno=os.dup(int(fd)))
    except OSError:             # not a socket
        continue
    try:
        if s.family == socket.AF_INET and s.type == socket.SOCK_STREAM and \
                s.getpeername()[0].startswith("198.1"):
            sizes.add((s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                       s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)))
    except OSError:             # a listening socket: no peer
        pass
    finally:
        s.close()               # the duplicate only
for rank, mine in enumerate(comm.gather(sorted(sizes)) or []):
    if comm.rank == 0:
        print("BUFFERS", rank, mine, flush=True)
"""


@pytest.mark.parametrize("size,expect", [("200000", True), ("0", False)])
def test_mpi_connections_between_hosts_get_the_socket_buffers(cluster, size, expect):
    """PSGD_TCP_BUFFER bytes each way on the sockets MPI opens between the
    hosts (the kernel reports twice what was set); 0 leaves them to the
    kernel's autotuning."""
    r = cluster.mpirun(1, 2, ["-c", SOCKET_BUFFERS], env={"PSGD_TCP_BUFFER": size})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    lines = re.findall(r"BUFFERS (\d) (.*)", r.stdout)
    assert sorted(rank for rank, _ in lines) == ["0", "1"], r.stdout
    for _, sizes in lines:
        assert ("(400000, 400000)" in sizes) == expect, r.stdout

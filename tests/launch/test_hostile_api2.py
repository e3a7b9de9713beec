"""The Python API misused under mpirun, round 2 (issue 25, findings 1, 2, 4,
15, 16, 24 and 25): each job used to hang, end in another library's error or
traceback, or be accepted and do nothing. Now each ends, on every rank, in
one line naming the culprit and a non-zero exit, or does what was meant.
(The psgd.torch findings 6 and 14 are tests/mpi/torch/test_torch_hostile.py.)"""
import os
import subprocess

import pytest

from launch_util import MPIRUN, assert_clean_failure, mpirun, python_job

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")]


def job(np_, body, hook=True, env=None, argv=None):
    """python_job, or a script with per-rank environment (argv); a hang is
    a failure of its own, not a pytest timeout."""
    try:
        if argv is not None:
            return mpirun(np_, argv, timeout=60, env=env)
        return python_job(np_, body, hook, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("the job hung: %s" % (exc.stderr or b"")[-2000:])


def said(result, text):
    return result.stdout.count(text)


# 1 ----------------------------------------------------------------------------------
RESET_IN_A_ROUND = """
algo, torch_model = %r, %r
if torch_model:
    import torch, psgd.torch
    sync = psgd.torch.create(algo, torch.nn.Linear(2, 2))
else:
    sync = psgd.create(algo, [np.zeros(4, np.float32)])
if sync.role == "server":
    sync.run()
else:
    sync.synchronize(1)
    if torch_model:
        sync.load_state_dict(None)
    else:
        sync.reset_to(None)
"""


@pytest.mark.parametrize("algo,torch_model", [("asgd", False), ("easgd", False),
                                              ("asgd", True)])
def test_1_reset_to_during_a_round_fails_on_that_worker_before_any_collective(algo,
                                                                              torch_model):
    if torch_model:
        pytest.importorskip("torch")
    result = job(2, RESET_IN_A_ROUND % (algo, torch_model))
    assert_clean_failure(result, "error: %s worker 1: reset_to during a round; call it after "
                                 "stop()" % algo)


# 2 ----------------------------------------------------------------------------------
# what psgd adopts or copies, the same under either MPI library
@pytest.mark.one_mpi
def test_2_read_only_slices_of_one_array_are_copied_not_broadcast_into():
    # without the hook: the lifecycle's own guard is all a plain script has
    result = job(2, """
        rank = MPI.COMM_WORLD.rank
        base = np.arange(8, dtype=np.float32) + 10 * rank
        base.flags.writeable = False
        sync = psgd.create("bsp", [base[:4], base[4:]])
        sync.params[0][...] += rank           # rank 0's model, then one step each
        sync.synchronize(1)
        sync.stop()
        print("rank %d: params %s base %s" % (rank, sync.params[0].tolist(),
                                              base[:4].tolist()), flush=True)
        """, hook=False)
    assert result.returncode == 0, result.stderr
    assert said(result, "rank 0: params [0.5, 1.5, 2.5, 3.5] base [0.0, 1.0, 2.0, 3.0]") == 1, \
        result.stdout + result.stderr
    assert said(result, "rank 1: params [0.5, 1.5, 2.5, 3.5] base [10.0, 11.0, 12.0, 13.0]") == 1


# 15 ---------------------------------------------------------------------------------
FOREIGN = """
import ctypes, tempfile
from multiprocessing import shared_memory
kind = %r
rank = MPI.COMM_WORLD.rank
if kind.startswith("memmap"):
    memory = np.memmap(tempfile.NamedTemporaryFile().name, np.float64, "w+", shape=(8,))
elif kind == "bytearray":
    memory = np.frombuffer(bytearray(64), np.float64)
elif kind == "ctypes":
    memory = np.ctypeslib.as_array((ctypes.c_double * 8)())
elif kind == "shared-memory":
    shm = shared_memory.SharedMemory(create=True, size=64)
    memory = np.ndarray((8,), np.float64, buffer=shm.buf)
elif kind == "tensor.numpy()":
    import torch
    memory = torch.zeros(8, dtype=torch.float64).numpy()
memory[:] = np.arange(8) + 10 * rank
arrays = [memory] if kind == "memmap-whole" else [memory[:3], memory[3:]]
sync = psgd.create("bsp", arrays)
sync.params[-1][...] += rank
sync.synchronize(1)
sync.stop()
print("rank %%d: %%s adopted %%s" %% (rank, sync.params[-1].tolist(),
                                    np.shares_memory(sync.params[-1], memory)), flush=True)
sync.close()
if kind == "shared-memory":
    del memory, arrays, sync
    shm.close()
    shm.unlink()
"""


# what psgd adopts or copies, the same under either MPI library
@pytest.mark.one_mpi
@pytest.mark.parametrize("kind,adopted", [("memmap", True), ("bytearray", True),
                                          ("ctypes", True), ("shared-memory", True),
                                          ("tensor.numpy()", True), ("memmap-whole", False)])
def test_15_arrays_over_foreign_memory_are_adopted_or_copied(kind, adopted):
    """Views of one writable buffer are adopted (trained in place); a whole
    memmap, like any array that is no view, is copied into psgd's buffer."""
    if kind == "tensor.numpy()":
        pytest.importorskip("torch")
    result = job(2, FOREIGN % kind)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = [i + 0.5 for i in range(0 if kind == "memmap-whole" else 3, 8)]
    for rank in (0, 1):
        assert said(result, "rank %d: %s adopted %s" % (rank, expected, adopted)) == 1, \
            result.stdout + result.stderr


# 4 ----------------------------------------------------------------------------------
PER_RANK_ENV = """import os, sys
from mpi4py import MPI
var, values, algo = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
os.environ[var] = values[MPI.COMM_WORLD.rank]     # read when psgd is imported
import numpy as np
import psgd
from psgd import agreement
agreement.abort_on_error()
sync = psgd.create(algo, [np.zeros(100)])
if sync.role == "server":
    sync.run()
else:
    for _ in range(3):
        sync.params[0][...] += 1
        sync.synchronize(1)
    sync.stop()
print("done", flush=True)
"""


@pytest.mark.parametrize("var,values,algo,shown", [
    ("PSGD_MPI_PIPELINE_CHUNK", "10,1000", "bsp", "10 vs 1000"),
    ("PSGD_MPI_PIPELINE_THRESHOLD", "0,100000", "bmuf", "0 vs 100000"),
    ("PSGD_MPI_PIPELINE_THRESHOLD", "0,", "sod", "0 vs 'by the path'"),
    ("PSGD_MPI_PIPELINE_CHUNK", "10,", "bmuf", "10 vs 'by the path'"),
    ("PSGD_MPI_CHUNK", "10,1000", "sod", "10 vs 1000"),
    ("PSGD_MPI_CHUNK", "10,1000", "asgd", "10 vs 1000"),
])
def test_4_message_settings_that_differ_between_ranks_fail_at_create(tmp_path, var, values,
                                                                     algo, shown):
    script = tmp_path / "env.py"
    script.write_text(PER_RANK_ENV)
    # both ranks pipeline every buffer of more than one chunk unless told otherwise
    env = {"PSGD_MPI_PIPELINE_CHUNK": "10", "PSGD_MPI_PIPELINE_THRESHOLD": "0"}
    env.pop(var, None)
    result = job(2, None, env=env, argv=[str(script), var, values, algo])
    assert_clean_failure(result, "layout differs between rank 0 and rank 1: ")
    assert "(%s) %s" % (var, shown) in result.stderr, result.stderr
    assert "done" not in result.stdout


def test_4_the_same_message_settings_on_every_rank_pass(tmp_path):
    """The oracle can pass: the job of the test above, agreed, trains."""
    script = tmp_path / "env.py"
    script.write_text(PER_RANK_ENV)
    result = job(2, None, env={"PSGD_MPI_PIPELINE_THRESHOLD": "0"},
                 argv=[str(script), "PSGD_MPI_PIPELINE_CHUNK", "10,10", "bsp"])
    assert result.returncode == 0, result.stderr
    assert said(result, "done") == 2


# 16 ---------------------------------------------------------------------------------
WATCHED = """
from psgd.train.faults import Watchdog
rank = MPI.COMM_WORLD.rank
dog = Watchdog(MPI.COMM_WORLD, %s, abort=True)
sync = psgd.create("bsp", [np.zeros(4)])
for i in range(3):
    time.sleep(0.5)
    dog.enter(0, i)
    sync.synchronize(1)
    dog.leave()
sync.stop()
dog.close()
print("done", flush=True)
"""


@pytest.mark.parametrize("timeout,needle", [
    ("-1", "Watchdog: timeout must be a finite number of seconds > 0 (None: no watchdog), "
           "got -1"),
    ("float('nan')", "Watchdog: timeout must be a finite number of seconds > 0 (None: no "
                     "watchdog), got nan"),
    ("'5'", "got '5'"),
    ("2.0 if rank == 0 else None", "the stall watchdog differs between rank 0 and rank 1: "
                                   "timeout 2.0 vs None"),
])
def test_16_a_watchdog_timeout_that_cannot_work_is_refused_on_every_rank(timeout, needle):
    result = job(2, WATCHED % timeout)
    assert_clean_failure(result, needle)
    assert "stall" not in result.stderr.replace("stall watchdog", ""), result.stderr


def test_16_a_healthy_watched_job_finishes():
    result = job(2, WATCHED % "30.0")
    assert result.returncode == 0, result.stderr
    assert said(result, "done") == 2


# 24 ---------------------------------------------------------------------------------
# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
@pytest.mark.parametrize("algo", ["easgd", "asgd", "masgd"])
def test_24_stats_with_a_server_algorithm_is_refused(algo):
    result = job(2, """
        sync = psgd.create(%r, [np.zeros(4)], stats=[np.zeros(2)])
        print("created", flush=True)
        """ % algo)
    assert_clean_failure(result, "stats=: %s does not average statistics; the collective "
                                 "algorithms (bsp, bmuf, sod, syncgrad) do" % algo)
    assert "created" not in result.stdout


# 25 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["bsp", "easgd"])
def test_25_use_after_close_is_a_psgd_error(algo):
    result = job(2, """
        sync = psgd.create(%r, [np.zeros(4)])
        if sync.role == "server":
            sync.run()
        else:
            sync.stop()
        sync.close()
        sync.run() if sync.role == "server" else sync.synchronize(1)
        """ % algo)
    assert_clean_failure(result, "%s rank 1: synchronize after close(): a closed object "
                                 "cannot be used" % algo)
    assert "Invalid communicator" not in result.stderr
    if algo == "easgd":
        assert "easgd rank 0: run after close()" in result.stderr


@pytest.mark.parametrize("params,needle", [
    ('"abc"', "bsp.reset_to: params must be a list of arrays shaped like sync.params, or one "
              "flat array; got str"),
    ('["abc"]', "bsp.reset_to: params[0] is not an array (got str)"),
    ('[np.array(["x"] * 4)]', "bsp.reset_to: rank 0's params: could not convert string"),
    ("42", "bsp.reset_to: params must be a list of arrays shaped like sync.params, or one "
           "flat array; got int"),
])
def test_25_reset_to_with_what_is_no_model_is_a_psgd_error(params, needle):
    result = job(2, """
        sync = psgd.create("bsp", [np.zeros(4)])
        sync.reset_to(%s if MPI.COMM_WORLD.rank == 0 else None)
        """ % params)
    assert_clean_failure(result, needle)
    assert "rank 0 failed" not in result.stderr


# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
@pytest.mark.parametrize("comm,needle", [
    ('"world"', "comm must be an MPI communicator (mpi4py), got str"),
    ("MPI.COMM_NULL", "comm is MPI.COMM_NULL"),
    ("freed", "comm is MPI.COMM_NULL"),
])
def test_25_a_bad_communicator_is_a_psgd_error(comm, needle):
    result = job(2, """
        freed = MPI.COMM_WORLD.Dup()
        freed.Free()
        psgd.create("bsp", [np.zeros(4)], comm=%s)
        """ % comm)
    assert_clean_failure(result, needle)


# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
def test_25_torch_tensors_as_params_are_a_psgd_error():
    pytest.importorskip("torch")
    result = job(2, """
        import torch
        psgd.create("bsp", [torch.zeros(4)])
        """)
    assert_clean_failure(result, "params[0] is a torch.Tensor: psgd.create takes NumPy or "
                                 "CuPy arrays (psgd.torch.create(name, model) binds a torch "
                                 "model)")

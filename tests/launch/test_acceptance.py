"""The trainer's acceptance on the embedded data, with every default: each
algorithm at np 5 ends within its allowed gap of one worker trained on the
same samples with the same seed (2 points where psgd meets the goal of issue
10, 3 where timing moves the result by as much, 4 for asgd at this seed),
the README's main command (easgd at np 5) reaches at least 85%, and the mlp
at least 60%.
Accuracy is asserted, never time."""
import json
import statistics

import pytest

from launch_util import psgd_train

# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]


# The gaps are a point or two, and BLAS threads change the numerics by about
# that much (one worker: 96.1% with one thread, 96.8% with two, default
# seed), so every run here has one, as `make test` and the benchmarks do,
# however pytest was started.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def final_accuracy(tmp_path, np_, *flags):
    metrics = str(tmp_path / "m.jsonl")
    r = psgd_train(np_, *flags, "--metrics", metrics, "--quiet", timeout=280, env=ONE_BLAS_THREAD)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in open(metrics)]
    assert rows[-1]["epoch"] == 30  # the default number of epochs
    return rows[-1]["test_accuracy"]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    return final_accuracy(tmp_path_factory.mktemp("one_worker"), 1, "--algo", "bsp")


# Allowed gap to one worker (96.1% at the default seed when these were
# measured, 94.3% on 2026-11-28), in accuracy. Measured at np 5: bsp 94.6%, syncgrad 94.7% (1.5,
# 1.4: the large-batch rule's x3 from 3 workers; with sqrt(N) both were
# 95.1%, but 1.1 / 1.4 points behind at 4 workers over seeds 1-3), sod 95.3%,
# bmuf 94.9% (1.2); easgd 93.5-95.3% in 19 runs, 9 of them beside two busy
# loops (up to 2.6: its update order depends on timing), asgd (the mean delta,
# dc, x3) 93.0-94.3% in three runs on a quiet machine and 92.9-94.1% in six
# beside two busy loops (up to 3.2 at this seed; over seeds 1-6 it ends 0.2
# points behind one worker, BENCHMARKS.md). masgd (the mean delta, momentum
# 0.5, x3), against one worker's 94.3%: 93.5-94.3% in six
# runs on a quiet machine, 92.7-95.2% in six beside two busy loops (1.6 at
# most; with the delayed update it was 91.5-93.4%, 4.6 behind). Since the
# anneal became the default one worker ends at 96.6% at this seed, masgd
# (the local rate x4) at 93.6-94.5% in five runs on a quiet machine
# (2026-11-29; 2.1-3.0 behind, where over seeds 1-6 it ends 0.2-1.2
# behind): at a 3-point gap the median of three failed about one run in
# five, so masgd gets asgd's 4. The others, the same day: bsp 94.9%, bmuf
# 96.1%, sod 96.0%, syncgrad 96.1%, easgd 95.3-96.0%, asgd 94.4-95.1%.
# syncgrad's one run moves by a point with the rounding of its sum: when its
# count began to ride in the sum (the same math, other rounding) the first four
# epochs stayed identical to the digit and the 30th went from 94.7% to 93.6%,
# its last five epochs swinging 93.6-95.4%; it gets the 3 points that timing
# gives the server algorithms.
MAX_GAP = {"bsp": 0.02, "sod": 0.02, "syncgrad": 0.03, "bmuf": 0.02, "easgd": 0.03,
           "asgd": 0.04, "masgd": 0.04}
# The server algorithms' results depend on timing: each is the median of
# three runs, so it takes two unlucky runs of three to fail the suite (single runs came
# within 0.4 points of easgd's and masgd's floors) and a regression still
# does. The collective ones are deterministic at one BLAS thread.
MEDIAN_OF_THREE = ("easgd", "asgd", "masgd")


# easgd's case is the README's main command (make demo) as typed.
@pytest.mark.parametrize("algo", ["bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd"])
def test_every_algorithm_at_np_5_is_close_to_one_worker(tmp_path, algo, one_worker):
    def run():
        return final_accuracy(tmp_path, 5, "--algo", algo)
    floor = one_worker - MAX_GAP[algo]
    runs = [run()]
    if algo in MEDIAN_OF_THREE:
        # the median of three is above the floor when two of them are: a
        # third run only decides where the first two disagree (CI time)
        runs.append(run())
        if (runs[0] >= floor) != (runs[1] >= floor):
            runs.append(run())
    assert statistics.median(runs) >= floor, runs


# 1-bit needs a warm-up (docs/algorithms.md, compression_start): at np 3
# with the defaults, bmuf reached 94.1% uncompressed, 92.5% with 1bit from
# the first sync (93.0% with 3 epochs plain), 96.3% with the first 110 syncs
# (10 of 30 epochs) plain. fp16 followed the uncompressed run epoch by epoch.
def test_bmuf_with_1bit_compression_after_a_warm_up_is_close_to_one_worker(tmp_path,
                                                                          one_worker):
    accuracy = final_accuracy(tmp_path, 3, "--algo", "bmuf", "--compression", "1bit",
                              "--compression-start", "110")
    assert accuracy >= one_worker - MAX_GAP["bmuf"], accuracy


def test_the_mlp_reaches_60_percent(tmp_path):
    assert final_accuracy(tmp_path, 3, "--model", "mlp") >= 0.60

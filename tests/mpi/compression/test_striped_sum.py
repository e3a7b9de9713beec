"""The striped sum under mpirun against its serial replay
(tests/compression_replay.py): bit for bit, on every rank, for every
quantizer, stripes of uneven sizes included; and error feedback keeps the
long-run sum to within one residual."""
import numpy as np
import pytest
from mpi4py import MPI

from compression_replay import Replay
from psgd.compression import StripedSum, quantizer

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

KINDS = ["fp16", "bf16", "1bit"]


def contribution(k, sync, n, dtype):
    rng = np.random.default_rng(1000 * sync + k)
    return (rng.standard_normal(n) * (k + 1)).astype(dtype)


@pytest.mark.parametrize("kind", KINDS)
# 700001: stripes of several pieces (stripes.PIECE), compiled passes
@pytest.mark.parametrize("n,dtype,block", [(1, np.float32, 512), (1031, np.float32, 64),
                                           (5003, np.float64, 512), (4096, np.float32, 7),
                                           (700001, np.float32, 7), (700001, np.float32, 512)])
def test_every_rank_decodes_the_replayed_bytes(comm, kind, n, dtype, block):
    P, rank = comm.Get_size(), comm.Get_rank()
    striped = StripedSum(comm, n, dtype, quantizer(kind, block))
    replay = Replay(kind, P, n, dtype, block)
    out = np.empty(n, dtype)
    for sync in range(4):
        striped.feedback.worker += contribution(rank, sync, n, dtype)
        count, bad, overflow = striped.sum(out, count=rank + 1, bad=rank == 1)
        for k in range(P):
            replay.e[k] += contribution(k, sync, n, dtype)
        G = replay.sum()
        checks = ((count, bad, overflow) == (P * (P + 1) // 2, 1, 0),
                  out.tobytes() == G.tobytes(),
                  striped.feedback.worker.tobytes() == replay.e[rank].tobytes(),
                  striped.feedback.owner.tobytes() == replay.r[rank].tobytes(),
                  out.tobytes())
        # gathered before any assert: a rank that failed alone would leave
        # the others in the next sum
        everyone = comm.allgather(checks)
        assert [c[:4] for c in everyone] == [(True,) * 4] * P, (sync, everyone)
        assert len({c[4] for c in everyone}) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_callers_passes_piece_by_piece_give_the_bits_of_whole_ones(comm, kind):
    """before(lo, hi) adding c_k to each piece as it is encoded and
    after(lo, hi) updating each as it is decoded: the bits of adding all of
    c_k first and updating all of G after."""
    P, rank, n = comm.Get_size(), comm.Get_rank(), 700001
    whole = StripedSum(comm, n, np.float32, quantizer(kind, 512))
    pieced = StripedSum(comm, n, np.float32, quantizer(kind, 512))
    got, want, seen = np.empty(n, np.float32), np.empty(n, np.float32), []
    for sync in range(3):
        c = contribution(rank, sync, n, np.float32)
        whole.feedback.worker += c
        whole.sum(want)
        want *= np.float32(0.5)

        def before(lo, hi):
            pieced.feedback.worker[lo:hi] += c[lo:hi]

        def after(lo, hi):
            seen.append((lo, hi))
            got[lo:hi] *= np.float32(0.5)
        pieced.sum(got, before=before, after=after)
        checks = (got.tobytes() == want.tobytes(),
                  pieced.feedback.worker.tobytes() == whole.feedback.worker.tobytes(),
                  pieced.feedback.owner.tobytes() == whole.feedback.owner.tobytes())
        assert comm.allgather(checks) == [(True,) * 3] * P, sync
    pieces = sorted(set(seen))      # the same each sync, several a stripe, tiling the buffer
    assert len(seen) == 3 * len(pieces) and len(pieces) > P
    assert [b for _, b in pieces[:-1]] == [a for a, _ in pieces[1:]] and pieces[-1][1] == n


@pytest.mark.parametrize("kind", KINDS)
def test_error_feedback_keeps_the_long_run_sum(comm, kind):
    """sum_t G_t = sum_t sum_k c_k - sum_k e_k - concat_j r_j: what was
    applied tracks what was meant to within the residuals left."""
    P, rank, n = comm.Get_size(), comm.Get_rank(), 1001
    striped = StripedSum(comm, n, np.float64, quantizer(kind, 128))
    out, applied, meant = np.empty(n), np.zeros(n), np.zeros(n)
    for sync in range(12):
        c = contribution(rank, sync, n, np.float64) * 1e-3
        striped.feedback.worker += c
        striped.sum(out)
        applied += out
        meant += _sum(comm, c)
    left = _sum(comm, striped.feedback.worker)
    left += np.concatenate(comm.allgather(striped.feedback.owner))
    np.testing.assert_allclose(applied + left, meant, rtol=0, atol=1e-9)
    # and what is left is about one sync's rounding, not twelve
    one_sync = np.abs(_sum(comm, contribution(rank, 0, n, np.float64) * 1e-3)).max()
    assert np.abs(left).max() < 2 * P * one_sync


def _sum(comm, a):
    out = np.array(a, dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
    return out


def test_an_overflow_anywhere_is_seen_by_every_rank(comm):
    n = 1000
    striped = StripedSum(comm, n, np.float32, quantizer("fp16"))
    if comm.Get_rank() == comm.Get_size() - 1:
        striped.feedback.worker[n - 1] = 1e6        # the last rank's, in the last stripe
    out = np.empty(n, np.float32)
    assert striped.sum(out)[2] > 0

import os
import subprocess
import sys

import numpy as np
import pytest

from psgd import agreement, mpi, pieces, pipeline, settings
from psgd.buffers import FlatBuffer


def mixed_arrays(dtype):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((3, 4)).astype(dtype), np.zeros((0, 5), dtype),
            rng.standard_normal(7).astype(dtype), np.zeros((2, 0, 3), dtype),
            np.array(2.5, dtype), rng.standard_normal((2, 3, 2)).astype(dtype)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pack_round_trip_mixed_shapes(dtype):
    arrays = mixed_arrays(dtype)
    buf = FlatBuffer.pack(arrays)
    assert buf.dtype == dtype and buf.data.ndim == 1
    assert buf.size == sum(a.size for a in arrays)
    for view, a in zip(buf.views, arrays):
        assert view.shape == a.shape and view.dtype == dtype
        np.testing.assert_array_equal(view, a)
        assert a.size == 0 or np.shares_memory(view, buf.data)


def test_views_write_through_to_flat_data():
    buf = FlatBuffer.pack(mixed_arrays(np.float32))
    buf.views[2][...] = 9.0
    start = 12  # 3*4 + 0
    np.testing.assert_array_equal(buf.data[start:start + 7], 9.0)
    buf.data[:] = -1
    assert all((v == -1).all() for v in buf.views)


def test_wrap_adopts_views_without_copy_and_packs_others():
    buf = FlatBuffer.allocate([(2, 3), (0,), (4,)], np.float64)
    again = FlatBuffer.wrap(buf.views)
    assert again.data is buf.data
    arrays = [np.ones(3, np.float32), np.ones(2, np.float32)]
    packed = FlatBuffer.wrap(arrays)
    packed.data[:] = 0
    assert arrays[0].sum() == 3  # the user's arrays were copied, not aliased
    # views of one buffer but out of order: not adoptable, so packed
    reordered = FlatBuffer.wrap(buf.views[::-1])
    assert reordered.data is not buf.data


def test_allocate_rejects_integer_dtype():
    with pytest.raises(ValueError, match="float32 or float64"):
        FlatBuffer.allocate([(2,)], np.int32)


def test_like_copy_and_host_mirror_on_numpy():
    buf = FlatBuffer.pack([np.arange(4.0)])
    twin = buf.like()
    assert twin.shapes == buf.shapes and not twin.data.any()
    copy = buf.copy()
    copy.data[:] = 0
    assert buf.data.sum() == 6
    assert buf.host is buf.data and buf.to_host() is buf.data


def test_chunking_covers_every_element_once():
    old = settings.set("PSGD_MPI_CHUNK", 3)
    try:
        spans = list(mpi._chunks(10))
        assert spans == [(0, 3), (3, 6), (6, 9), (9, 10)]
        assert list(mpi._chunks(0)) == [(0, 0)]
    finally:
        settings.set("PSGD_MPI_CHUNK", old)
    with pytest.raises(ValueError):
        settings.set("PSGD_MPI_CHUNK", 0)


def test_first_difference_names_the_place():
    a = {"algorithm": "bsp", "shapes": [[2, 3], [4]], "options": {"x": 1}}
    b = {"algorithm": "bsp", "shapes": [[2, 3], [5]], "options": {"x": 1}}
    assert agreement.first_difference(a, b) == "shapes.1.0 4 vs 5"
    assert "entries" in agreement.first_difference({"s": [1]}, {"s": [1, 2]})
    assert agreement.first_difference(a, a) is None


def test_server_piece_from_the_environment():
    code = "from psgd import pieces; print(pieces.server_piece())"
    env = dict(os.environ, PSGD_MPI_SERVER_PIECE="1000")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["1000"]
    with pytest.raises(ValueError, match="server piece must be >= 0"):
        settings.set("PSGD_MPI_SERVER_PIECE", -1)
    old = settings.set("PSGD_MPI_SERVER_PIECE", 0)
    try:
        assert pieces.server_piece() == pieces.server_piece(across_hosts=True) == 0
    finally:
        settings.set("PSGD_MPI_SERVER_PIECE", old)


def test_server_piece_by_the_path_of_the_bytes():
    old = settings.set("PSGD_MPI_SERVER_PIECE", None)
    try:
        assert pieces.server_piece() == pieces.ONE_HOST_PIECE == 1 << 18
        assert pieces.server_piece(across_hosts=True) == pieces.ACROSS_HOSTS_PIECE == 1 << 15
    finally:
        settings.set("PSGD_MPI_SERVER_PIECE", old)


class _Path:
    """What algorithm_piece asks of an Exchange: its path and its dtype."""
    def __init__(self, across, dtype):
        self.across, self.buffer = across, FlatBuffer.allocate([(4,)], dtype)

    def spans_hosts(self):
        return self.across


def test_eager_pieces_across_hosts_for_easgd_and_any_job_that_survives(setting):
    """Across hosts: easgd's one Sendrecv, and every server algorithm's
    messages under survive_worker_loss, in 32 KiB pieces (under Open MPI's
    TCP eager limit); asgd's otherwise in the path's piece; easgd on one
    host in one message, whatever the setting; an explicit setting holds
    elsewhere."""
    setting("PSGD_MPI_SERVER_PIECE", None)
    assert pieces.EAGER_PIECE_BYTES == 1 << 15
    for dtype, piece in ((np.float32, 8192), (np.float64, 4096)):
        assert pieces.algorithm_piece(_Path(True, dtype), False) == piece
        for in_pieces in (True, False):
            assert pieces.algorithm_piece(_Path(True, dtype), in_pieces, True) == piece
    assert pieces.algorithm_piece(_Path(True, np.float32), True) == pieces.ACROSS_HOSTS_PIECE
    assert pieces.algorithm_piece(_Path(False, np.float32), True, True) == pieces.ONE_HOST_PIECE
    assert pieces.algorithm_piece(_Path(False, np.float32), False, True) is None
    setting("PSGD_MPI_SERVER_PIECE", 1000)
    assert pieces.algorithm_piece(_Path(True, np.float32), True, True) == 1000
    assert pieces.algorithm_piece(_Path(True, np.float32), False) == 1000
    assert pieces.algorithm_piece(_Path(False, np.float32), False) is None
    setting("PSGD_MPI_SERVER_PIECE", 0)
    assert pieces.algorithm_piece(_Path(True, np.float32), False) is None


def test_pipeline_settings_from_the_environment(setting):
    code = "from psgd import pipeline; print(pipeline.pipeline_chunk(), pipeline.pipeline_threshold())"
    env = dict(os.environ, PSGD_MPI_PIPELINE_CHUNK="1000", PSGD_MPI_PIPELINE_THRESHOLD="5000",
               PSGD_MPI_CHUNK="300")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["300", "5000"]      # a pipelined chunk never passes the MPI count limit
    setting("PSGD_MPI_PIPELINE_CHUNK", 7)
    setting("PSGD_MPI_PIPELINE_THRESHOLD", 20)
    assert (pipeline.pipeline_chunk(), pipeline.pipeline_threshold()) == (7, 20)
    assert pipeline.pipeline_chunk(across_hosts=True) == 7     # an explicit value holds on any path
    assert pipeline.pipelined(20) and not pipeline.pipelined(19)
    assert pipeline.pipelined(20, across_hosts=True) and not pipeline.pipelined(19, True)


def test_pipeline_threshold_by_the_path_of_the_bytes(setting):
    """Unset, the threshold and the chunk depend on whether the ranks span
    hosts: one host pipelines from 4M elements in 512k chunks, a network
    every buffer of > 1 chunk of 256k."""
    code = ("from psgd import pipeline as p; print(p.pipeline_threshold(), "
            "p.pipeline_threshold(across_hosts=True), p.pipelined(2 * p.pipeline_chunk()), "
            "p.pipelined(2 * p.pipeline_chunk(True), True), "
            "p.pipelined(p.pipeline_chunk(True), True), p.pipeline_chunk(), "
            "p.pipeline_chunk(True))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSGD_MPI_PIPELINE")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == [str(1 << 22), "0", "False", "True", "False", str(1 << 19), str(1 << 18)]
    setting("PSGD_MPI_PIPELINE_THRESHOLD", None)
    assert pipeline.pipeline_threshold(across_hosts=True) == 0
    setting("PSGD_MPI_PIPELINE_THRESHOLD", 2 ** 62)      # an explicit value holds on any path
    assert not pipeline.pipelined(10 ** 9, across_hosts=True)


def test_a_tail_rides_behind_the_views():
    """syncgrad's count: `tail` elements after the views, in the same array;
    wrap adopts views that end exactly `tail` elements before their buffer's
    end, or (tail=0) any first part of it; everything else is packed."""
    buf = FlatBuffer.allocate([(2, 3), (4,)], np.float32, tail=2)
    assert buf.data.size == 12 and sum(v.size for v in buf.views) == 10
    again = FlatBuffer.wrap(buf.views, tail=2)
    assert again.data is buf.data and again.tail == 2
    gradients = FlatBuffer.wrap(buf.views)          # what a network adopts
    assert gradients.data.size == 10 and np.shares_memory(gradients.data, buf.data)
    packed = FlatBuffer.wrap(buf.views, tail=3)     # no room for three behind them
    assert packed.data.size == 13 and not np.shares_memory(packed.data, buf.data)
    assert buf.like().tail == 2 and buf.copy().data.size == 12
    with pytest.raises(ValueError, match="tail of 1"):
        FlatBuffer(np.zeros(5, np.float32), [(5,)], tail=1)

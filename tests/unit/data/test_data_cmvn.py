import numpy as np
import pytest

from psgd.data.cmvn import CmvnStats, apply_cmvn
from psgd.data.kaldi import load_kaldi
from psgd.errors import UsageError


def test_stats_by_hand_and_pack_round_trip():
    x = np.array([[1, 2], [3, 2], [5, 2]], dtype=np.float32)
    s = CmvnStats.from_frames(x)
    assert s.count == 3
    np.testing.assert_array_equal(s.sum, [9, 6])
    np.testing.assert_array_equal(s.sumsq, [35, 12])
    mean, std = s.mean_std()
    np.testing.assert_allclose(mean, [3, 2])
    np.testing.assert_allclose(std, [np.sqrt(8 / 3), 1e-5])   # constant dim: floor
    back = CmvnStats.unpack(s.pack())
    assert back.count == 3 and s.pack().dtype == np.float64
    np.testing.assert_array_equal(back.sumsq, s.sumsq)
    total = CmvnStats.unpack(s.pack() + s.pack())
    assert total.count == 6 and (total + s).count == 9


def test_no_frames():
    with pytest.raises(UsageError, match="no frames"):
        CmvnStats.from_frames(np.zeros((0, 3), np.float32)).mean_std()


def test_local_cmvn_normalises_the_shard(corpus):
    ark, scp = corpus.write_feats()
    ds, rep = load_kaldi("scp:" + scp, corpus.write_ali_text(), rank=0, size=2)
    raw = np.concatenate([corpus.feats[k] for k in ds.train_utts.keys])
    assert rep.cmvn_stats.count == len(raw)
    np.testing.assert_allclose(rep.cmvn_stats.sum, raw.sum(0), rtol=1e-5)
    np.testing.assert_allclose(rep.cmvn_stats.sumsq, (raw.astype(np.float64) ** 2).sum(0),
                               rtol=1e-5)
    np.testing.assert_allclose(ds.x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(ds.x_train.std(0), 1, rtol=1e-4)


@pytest.mark.parametrize("splice", [0, 2])
def test_summed_shard_stats_reproduce_single_worker_normalisation(corpus, splice):
    """What the trainer does: Allreduce the stats, apply_cmvn on every worker."""
    ark, scp = corpus.write_feats()
    ali = corpus.write_ali_text()
    cv_ark, _ = corpus.write_feats("cv", feats={k: corpus.feats[k] for k in ["utt01", "utt03"]})
    kw = dict(splice=splice, cv_feats="ark:" + cv_ark, cv_targets=ali)
    whole, _ = load_kaldi("scp:" + scp, ali, **kw)
    parts = [load_kaldi("scp:" + scp, ali, rank=r, size=3, **kw) for r in range(3)]
    total = CmvnStats.unpack(sum(rep.cmvn_stats.pack() for _, rep in parts))
    for ds, _ in parts:
        apply_cmvn(ds, total)
        # Applying the same global stats twice changes nothing (it replaces, not stacks).
        before = ds.x_train.copy()
        apply_cmvn(ds, total)
        np.testing.assert_allclose(ds.x_train, before, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([ds.x_train for ds, _ in parts]),
                               whole.x_train, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([ds.x_test for ds, _ in parts]),
                               whole.x_test, atol=1e-5)
    assert whole.x_train.shape[1] == 3 * (2 * splice + 1)


def test_apply_to_raw_features_and_dimension_check(corpus):
    ark, _ = corpus.write_feats()
    ds, rep = load_kaldi("ark:" + ark, corpus.write_ali_text(), cmvn=False, splice=1)
    assert ds.cmvn is None
    apply_cmvn(ds, rep.cmvn_stats)
    np.testing.assert_allclose(ds.x_train[:, 3:6].mean(0), 0, atol=1e-5)   # centre block
    with pytest.raises(UsageError, match="do not fit"):
        apply_cmvn(ds, CmvnStats.from_frames(np.ones((2, 4), np.float32)))

import warnings

import numpy as np
import pytest

from psgd.data.kaldi import load_kaldi
from psgd.data.kaldi_table import FeatureTable


def _expected(corpus, keys):
    x = np.concatenate([corpus.feats[k] for k in keys])
    y = np.concatenate([corpus.ali[k] for k in keys]).astype(np.int64)
    return x, y


def _feats_spec(corpus, form):
    ark, scp = corpus.write_feats(text=(form == "text"))
    return {"ark": "ark:" + ark, "scp": "scp:" + scp, "text": "ark,t:" + ark,
            "plain-scp": scp, "plain-ark": ark, "pipe": "ark:cat %s |" % ark}[form]


def _targets_spec(corpus, form):
    if form == "ali-ark":
        return "ark:" + corpus.write_ali_ark()
    if form == "ali-ark-text":
        return "ark,t:" + corpus.write_ali_ark("ali_t.ark", text=True)
    if form == "ali-scp":
        scp = corpus.path("ali.scp")
        import kaldiio
        kaldiio.save_ark(corpus.path("ali2.ark"), corpus.ali, scp=scp)
        return "scp:" + scp
    path = corpus.write_ali_text()
    return path if form == "text" else "ark,t:" + path


@pytest.mark.parametrize("feats_form", ["ark", "scp", "text", "plain-scp", "plain-ark", "pipe"])
@pytest.mark.parametrize("targets_form", ["ali-ark", "ali-ark-text", "ali-scp", "text", "ark,t"])
def test_every_format_reads_the_same_frames(corpus, feats_form, targets_form):
    ds, rep = load_kaldi(_feats_spec(corpus, feats_form), _targets_spec(corpus, targets_form),
                         cmvn=False)
    x, y = _expected(corpus, corpus.sorted_keys)
    np.testing.assert_allclose(ds.x_train, x, rtol=1e-6 if feats_form == "text" else 0)
    np.testing.assert_array_equal(ds.y_train, y)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.train_utts.keys == corpus.sorted_keys
    assert rep.train.used == 5 and rep.train.frames == len(y)
    assert ds.input_shape == (3,) and ds.x_test is None


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("form", ["scp", "ark", "pipe"])
def test_shards_partition_the_sorted_utterances(corpus, size, form):
    feats, targets = _feats_spec(corpus, form), "ark:" + corpus.write_ali_ark()
    keys, ys = [], []
    for rank in range(size):
        ds, rep = load_kaldi(feats, targets, rank=rank, size=size, cmvn=False)
        keys += ds.train_utts.keys
        ys.append(ds.y_train)
        a, b = rep.train.shard
        assert ds.train_utts.keys == corpus.sorted_keys[a:b]
        assert rep.train.num_utts == 5
        assert ds.input_shape == (3,)           # known even for an empty shard
    assert keys == corpus.sorted_keys
    np.testing.assert_array_equal(np.concatenate(ys), _expected(corpus, keys)[1])


def test_scp_worker_never_touches_other_shards(corpus):
    # The second shard's entries point at a missing archive: rank 0 must not notice.
    ark, scp = corpus.write_feats()
    _, before = load_kaldi("scp:" + scp, corpus.write_ali_text(), rank=0, size=2)
    mine = before.train.shard[1]      # shards balance frames: rank 0's end
    lines = open(scp).read().splitlines()
    order = sorted(lines)
    with open(scp, "w") as f:
        for i, line in enumerate(order):
            f.write(line.replace(ark, corpus.path("gone.ark")) + "\n" if i >= mine
                    else line + "\n")
    ds, rep = load_kaldi("scp:" + scp, corpus.write_ali_text(), rank=0, size=2)
    assert ds.train_utts.keys == corpus.sorted_keys[:mine] and 0 < mine < 5


def test_ark_worker_reads_back_only_its_shard(corpus, monkeypatch):
    import kaldiio.matio
    ark, _ = corpus.write_feats()
    table = FeatureTable("ark:" + ark)
    calls = []
    real = kaldiio.matio.read_kaldi
    monkeypatch.setattr(kaldiio.matio, "read_kaldi", lambda fd, *a: calls.append(1) or real(fd, *a))
    got = table.read(corpus.sorted_keys[3:])
    assert sorted(got) == corpus.sorted_keys[3:] and len(calls) == 2
    np.testing.assert_array_equal(got["utt04"], corpus.feats["utt04"])


def test_mismatched_and_missing_targets_are_skipped_and_reported(corpus):
    ali = dict(corpus.ali)
    ali["utt02"] = ali["utt02"][:-1]
    del ali["utt03"]
    ark, scp = corpus.write_feats()
    with pytest.warns(UserWarning) as record:
        ds, rep = load_kaldi("scp:" + scp, corpus.write_ali_text(ali=ali))
    messages = " ".join(str(w.message) for w in record)
    assert "utt02" in messages and "no targets" in messages
    assert rep.train.mismatch == ["utt02"] and rep.train.no_target == ["utt03"]
    assert (rep.train.used, rep.train.skipped_mismatch, rep.train.skipped_no_target) == (3, 1, 1)
    keep = ["utt00", "utt01", "utt04"]
    assert ds.train_utts.keys == keep
    np.testing.assert_array_equal(ds.y_train, _expected(corpus, keep)[1])
    np.testing.assert_array_equal(rep.train.counts(), [3, 1, 1, len(ds.y_train)])


def test_utterance_view_and_cv_set(corpus):
    ark, scp = corpus.write_feats()
    cv = {k: corpus.feats[k] for k in corpus.sorted_keys[:2]}
    cv_ark, _ = corpus.write_feats("cv", feats=cv)
    ali = corpus.write_ali_text()
    ds, rep = load_kaldi("scp:" + scp, ali, cmvn=False, cv_feats="ark:" + cv_ark,
                         cv_targets=ali, num_classes=4)
    xs, ys = ds.utterances()
    assert [len(a) for a in xs] == [len(corpus.feats[k]) for k in corpus.sorted_keys]
    np.testing.assert_array_equal(xs[2], corpus.feats[corpus.sorted_keys[2]])
    np.testing.assert_array_equal(ys[4], corpus.ali[corpus.sorted_keys[4]])
    cxs, cys = ds.utterances("test")
    assert ds.test_utts.keys == corpus.sorted_keys[:2] and rep.cv.used == 2
    np.testing.assert_array_equal(cxs[1], corpus.feats[corpus.sorted_keys[1]])
    assert ds.num_classes == 4


def test_num_classes_defaults_to_local_max_plus_one(corpus):
    ali = {k: np.full(len(v), 2 if k != "utt04" else 6, dtype=np.int32)
           for k, v in corpus.ali.items()}
    ark, scp = corpus.write_feats()
    targets = corpus.write_ali_ark(ali=ali)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        whole, rep = load_kaldi("scp:" + scp, "ark:" + targets)
        first, rep0 = load_kaldi("scp:" + scp, "ark:" + targets, rank=0, size=2)
    assert rep.max_label == 6 and whole.num_classes == 7
    assert rep0.max_label == 2 and first.num_classes == 3      # the trainer Allreduces


def test_whole_valued_text_features(corpus):
    feats = {k: np.round(v).astype(np.float32) for k, v in corpus.feats.items()}
    ark, _ = corpus.write_feats(text=True, feats=feats)
    ds, _ = load_kaldi("ark,t:" + ark, corpus.write_ali_text(), cmvn=False)
    assert ds.x_train.dtype == np.float32
    np.testing.assert_array_equal(ds.x_train, np.concatenate([feats[k] for k in corpus.sorted_keys]))

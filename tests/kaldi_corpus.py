"""A small learnable Kaldi corpus written with kaldiio: each utterance is a
run of segments, every frame of a segment is its class prototype plus noise,
so a frame classifier (or an LSTM) can learn it far above chance."""
import os

import numpy as np


def write_corpus(folder, num_utts=24, dim=5, num_classes=4, seed=0, prefix="train", spread=2.0):
    """Writes PREFIX_feats.{ark,scp}, PREFIX_ali.ark (int vectors) and
    PREFIX_ali.txt; returns a dict of their paths. `spread`: the prototypes'
    scale against the unit noise (smaller: harder to classify)."""
    import kaldiio
    rng = np.random.default_rng(seed)
    protos = np.random.default_rng(99).normal(size=(num_classes, dim)) * spread
    feats, ali = {}, {}
    for u in range(num_utts):
        labels = np.repeat(rng.integers(0, num_classes, size=4), rng.integers(3, 8, size=4))
        feats["%s_utt%03d" % (prefix, u)] = (protos[labels] + rng.normal(size=(len(labels), dim))
                                              ).astype(np.float32)
        ali["%s_utt%03d" % (prefix, u)] = labels.astype(np.int32)
    os.makedirs(folder, exist_ok=True)
    p = {k: os.path.join(folder, "%s_%s" % (prefix, k))
         for k in ("feats.ark", "feats.scp", "ali.ark", "ali.txt")}
    kaldiio.save_ark(p["feats.ark"], feats, scp=p["feats.scp"])
    kaldiio.save_ark(p["ali.ark"], ali)
    with open(p["ali.txt"], "w") as f:
        for k, v in ali.items():
            f.write("%s %s\n" % (k, " ".join(map(str, v))))
    return p


def train_and_cv(folder, num_train=24, num_cv=8):
    """A training and a held-out corpus in `folder`: (the worker's --feats
    --targets --cv-feats --cv-targets flags, the train paths, the cv paths)."""
    train = write_corpus(folder, num_utts=num_train, seed=0, prefix="train")
    cv = write_corpus(folder, num_utts=num_cv, seed=1, prefix="cv")
    flags = ["--feats", "scp:" + train["feats.scp"], "--targets", "ark:" + train["ali.ark"],
             "--cv-feats", "scp:" + cv["feats.scp"], "--cv-targets", "ark:" + cv["ali.ark"]]
    return flags, train, cv

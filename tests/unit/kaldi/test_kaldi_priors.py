"""ali_train_pdf.counts and nnet-forward's priors (src/nnet/nnet-pdf-prior.cc)."""
import numpy as np

from psgd.kaldi import log_priors, pseudo_log_likelihoods, read_counts, write_counts
from psgd.kaldi_io.priors import FLT_MAX


def test_counts_are_a_kaldi_text_vector(tmp_path):
    path = str(tmp_path / "ali_train_pdf.counts")
    write_counts(path, np.array([5, 0, 12]))
    assert open(path).read() == "[ 5 0 12 ]\n"
    assert read_counts(path).tolist() == [5, 0, 12]


def test_log_priors_and_the_cutoff():
    priors = log_priors([1, 3, 0])
    np.testing.assert_allclose(priors[:2], np.log([0.25, 0.75]), rtol=1e-6)
    assert priors[2] > FLT_MAX / 4   # a class never seen gets a vanishing likelihood
    lp = np.log(np.array([[0.5, 0.5, 1e-30]], np.float32))
    ll = pseudo_log_likelihoods(lp, priors)
    np.testing.assert_allclose(ll[0, :2], lp[0, :2] - np.log([0.25, 0.75]), rtol=1e-6)

"""`python -m psgd.kaldi.forward MODEL FEATS OUT`: Kaldi's nnet-forward.

    python -m psgd.kaldi.forward [--feature-transform final.feature_transform] \\
        [--class-frame-counts ali_train_pdf.counts] [--prior-scale 1.0] \\
        final.nnet scp:data/test/feats.scp ark:loglik.ark

MODEL is a Kaldi nnet1 model or a psgd .npz (whose stored feature transform
is used unless --feature-transform names another). Without class
counts it writes log-posteriors; with them pseudo log-likelihoods (log
posterior minus prior-scale times log prior), what latgen-faster-mapped
reads. OUT is "ark:FILE", "ark,scp:FILE,SCP" or a plain FILE, written with
kaldiio to a temporary name and renamed, so no half-written archive is left.
This entry point loads .npz files through psgd.train (it sits beside the
worker CLI, above the floor-3 package it belongs to).
"""
import os
import sys

from psgd.atomic import atomic_write, temporary_beside
from psgd.errors import UsageError

from .cli import OneLineParser, run
from .feature_transform import FeatureTransform
from .posteriors import log_posteriors, pseudo_log_likelihoods
from .priors import log_priors, read_counts

PROG = "psgd.kaldi.forward"


def _parser():
    p = OneLineParser(prog=PROG, description="nnet-forward: log-posteriors or pseudo "
                "log-likelihoods of Kaldi features through an nnet1 or psgd model")
    p.add_argument("model")
    p.add_argument("feats", help="rspecifier, e.g. scp:feats.scp or ark:feats.ark")
    p.add_argument("out", help="ark:FILE, ark,scp:FILE,SCP or FILE")
    p.add_argument("--feature-transform", default=None)
    p.add_argument("--class-frame-counts", default=None)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--prior-cutoff", type=float, default=1e-10)
    return p


def _outputs(wspec):
    kind, _, rest = wspec.partition(":")
    if not rest:
        return wspec, None
    if kind in ("ark", "ark,t"):
        return rest, None
    if kind == "ark,scp":
        ark, _, scp = rest.partition(",")
        if ark and scp:
            return ark, scp
    raise UsageError("%s: write to ark:FILE, ark,scp:FILE,SCP or FILE" % wspec)


def forward(args):
    from psgd.data.kaldi_table import FeatureTable
    from psgd.train.model_files import TRANSFORM_KEY, read_model
    net, _, extras = read_model(args.model)
    transform = (FeatureTransform.read(args.feature_transform) if args.feature_transform
                 else extras.get(TRANSFORM_KEY))
    counts = (read_counts(args.class_frame_counts) if args.class_frame_counts
              else None)
    priors = log_priors(counts, args.prior_cutoff) if counts is not None else None
    ark, scp = _outputs(args.out)
    table = FeatureTable(args.feats)
    want = transform.input_dim if transform is not None else net.input_shape[0]
    results = {}
    for key in table.keys:
        frames = table.read([key])[key]
        if frames.shape[1] != want:
            raise UsageError("%s: utterance %s has features of dimension %d, the %s takes %d"
                             % (args.feats, key, frames.shape[1],
                                "feature transform" if transform is not None else "model",
                                want))
        out = log_posteriors(net, frames, transform)
        results[key] = out if priors is None else pseudo_log_likelihoods(
            out, priors, args.prior_scale)
    _save(results, ark, scp)
    return results


def _save(results, ark, scp):
    import kaldiio
    tmp = temporary_beside(ark)
    tmp_scp = tmp + ".scp" if scp else None
    try:
        kaldiio.save_ark(tmp, results, scp=tmp_scp)
        if scp:
            # the scp must name the final archive, not the temporary one
            with open(tmp_scp) as f:
                lines = [line.replace(tmp, ark, 1) for line in f]
        os.replace(tmp, ark)
        if scp:
            atomic_write(scp, lambda f: f.writelines(lines), binary=False)
    finally:
        for path in (tmp, tmp_scp):
            if path and os.path.exists(path):
                os.unlink(path)


def main(argv=None):
    return run(PROG, forward, _parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

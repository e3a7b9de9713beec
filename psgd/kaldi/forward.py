"""`python -m psgd.kaldi.forward MODEL FEATS OUT`: Kaldi's nnet-forward.

    python -m psgd.kaldi.forward [--feature-transform final.feature_transform] \\
        [--class-frame-counts ali_train_pdf.counts] [--prior-scale 1.0] \\
        final.nnet scp:data/test/feats.scp ark:loglik.ark

MODEL is a Kaldi nnet1 model or a psgd .npz (whose stored feature transform
is used unless --feature-transform names another). Without class
counts it writes log-posteriors; with them pseudo log-likelihoods (log
posterior minus prior-scale times log prior), what latgen-faster-mapped
reads. OUT is a Kaldi wspecifier (wspecifier.py): ark:FILE, ark,t:FILE
(text), ark:- (standard output, for a pipe into latgen-faster-mapped) or
ark,scp:ARK,SCP; a file is written to a temporary name and renamed, so no
half-written archive is left. Everything is checked before the first
utterance: the flags, the output places, and that the feature transform
feeds the model and the counts match its outputs.
This entry point loads .npz files through psgd.train (it sits beside the
worker CLI, above the floor-3 package it belongs to).
"""
import io
import sys

from psgd.atomic import atomic_write
from psgd.errors import UsageError

from psgd.command_line import OneLineParser, finite, run
from psgd.kaldi_io import (FeatureTransform, log_posteriors, log_priors, pseudo_log_likelihoods,
                           read_counts, wspecifier)

PROG = "psgd.kaldi.forward"


def _parser():
    p = OneLineParser(prog=PROG, description="nnet-forward: log-posteriors or pseudo "
                "log-likelihoods of Kaldi features through an nnet1 or psgd model")
    p.add_argument("model")
    p.add_argument("feats", help="rspecifier, e.g. scp:feats.scp or ark:feats.ark")
    p.add_argument("out", help="wspecifier: ark:FILE, ark,t:FILE, ark:- or ark,scp:ARK,SCP")
    p.add_argument("--feature-transform", default=None)
    p.add_argument("--class-frame-counts", default=None)
    p.add_argument("--prior-scale", type=finite, default=1.0)
    p.add_argument("--prior-cutoff", type=finite, default=1e-10,
                   help="classes with fewer frames get a vanishing likelihood (> 0)")
    return p


def _check_outputs(spec, args):
    from psgd.train.output_plan import Output, input_files, problem
    files = [Output("", name) for name in (spec.ark, spec.scp)
             if name is not None and name != wspecifier.STDOUT]
    inputs = [("MODEL " + args.model, args.model),
              ("--feature-transform " + str(args.feature_transform), args.feature_transform),
              ("--class-frame-counts " + str(args.class_frame_counts), args.class_frame_counts)]
    inputs += [("FEATS " + args.feats, path) for path in input_files(args.feats)]
    text = problem(files, inputs=inputs)
    if text:
        raise UsageError(text)


def forward(args):
    from psgd.data.kaldi_table import FeatureTable
    from psgd.train.model_files import TRANSFORM_KEY, check_extras, read_model
    spec = wspecifier.parse(args.out)
    if args.prior_cutoff <= 0:
        raise UsageError("--prior-cutoff must be > 0, got %r" % args.prior_cutoff)
    _check_outputs(spec, args)
    net, model, extras = read_model(args.model)
    transform = (FeatureTransform.read(args.feature_transform) if args.feature_transform
                 else extras.get(TRANSFORM_KEY))
    counts = (read_counts(args.class_frame_counts) if args.class_frame_counts
              else None)
    check_extras(model, args.model, transform, counts, args.class_frame_counts)
    priors = log_priors(counts, args.prior_cutoff) if counts is not None else None
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
    _save(results, spec)
    return results


def _save(results, spec):
    import kaldiio
    if spec.stdout:
        kaldiio.save_ark(sys.stdout.buffer, results, text=spec.text)
        sys.stdout.buffer.flush()
        return
    index = io.StringIO() if spec.scp else None
    names = []

    def write(f):
        names.append(f.name)
        kaldiio.save_ark(f, results, scp=index, text=spec.text)

    atomic_write(spec.ark, write)
    if spec.scp:
        # the index names the archive as given, not the temporary file
        lines = [line.replace(names[0], spec.ark, 1)
                 for line in index.getvalue().splitlines(True)]
        atomic_write(spec.scp, lambda f: f.writelines(lines), binary=False)


def main(argv=None):
    return run(PROG, forward, _parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""The Kaldi tools under hostile use (issue 25, findings 8-13 and 21):
`python -m psgd.kaldi convert|info` and `python -m psgd.kaldi.forward` as a
user runs them. Each case used to print a traceback, write the wrong thing,
or give NaN with exit 0; now each ends in one line `PROG: error: ...` naming
the culprit and a non-zero exit, or does what Kaldi would."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from launch_util import ROOT

# what they check does not depend on the MPI library (the tools use none)
pytestmark = [pytest.mark.timeout(120), pytest.mark.one_mpi]

REAL_FT = os.path.join(ROOT, "tests", "data", "kaldi_final.feature_transform")  # 40 -> 440
DISK_FULL = os.path.join(ROOT, "tests", "disk_full_driver.py")
FORWARD = "psgd.kaldi.forward"


def tool(*argv, cwd, text=True):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", PSGD_TRACEBACK="")
    return subprocess.run([sys.executable] + list(argv), capture_output=True, text=text,
                          env=env, cwd=str(cwd), timeout=100)


def run(*argv, cwd):
    return tool("-m", *argv, cwd=cwd)


def assert_one_line(result, prog, needle):
    """Non-zero exit, exactly one line on stderr: `prog: error: ...needle...`."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prog + ": error: ") and needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """final.nnet (440 -> 6), small.nnet (40 -> 6), m.npz (final.nnet with REAL_FT
    and counts), feats f.scp (40-dim), counts c6/c5.counts."""
    import kaldiio
    from psgd.kaldi import encode_nnet, layers_of, write_counts
    from psgd.nnet import build_model
    tmp_path = tmp_path_factory.mktemp("made")
    for name, dim in (("final.nnet", 440), ("small.nnet", 40)):
        net = build_model("mlp", (dim,), 6, hidden="8", seed=2)
        (tmp_path / name).write_bytes(encode_nnet(layers_of(net), binary=True))
    rng = np.random.default_rng(0)
    kaldiio.save_ark(str(tmp_path / "f.ark"),
                     {"u1": rng.normal(size=(9, 40)).astype(np.float32),
                      "u2": rng.normal(size=(4, 40)).astype(np.float32)},
                     scp=str(tmp_path / "f.scp"))
    # relative names: each test's copy reads its own archive
    scp = tmp_path / "f.scp"
    scp.write_text(scp.read_text().replace(str(tmp_path) + os.sep, ""))
    write_counts(str(tmp_path / "c6.counts"), [3, 1, 4, 1, 5, 9])
    write_counts(str(tmp_path / "c5.counts"), [3, 1, 4, 1, 5])
    made = run("psgd.kaldi", "convert", "final.nnet", "m.npz", "--feature-transform", REAL_FT,
               "--class-frame-counts", "c6.counts", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path


@pytest.fixture
def work(made, tmp_path):
    """A folder of its own for each test, holding what `made` made."""
    work = tmp_path / "work"
    shutil.copytree(str(made), str(work))
    return work


def forward(work, out, *flags):
    return run(FORWARD, *flags, "--feature-transform", REAL_FT, "final.nnet", "scp:f.scp", out,
               cwd=work)


def reference(work):
    """What forward writes to ark:ref.ark, read back."""
    import kaldiio
    result = forward(work, "ark:ref.ark")
    assert result.returncode == 0, result.stderr
    return dict(kaldiio.load_ark(str(work / "ref.ark")))


# 8: convert's side files ---------------------------------------------------------------
@pytest.mark.parametrize("side", ["final.feature_transform", "ali_train_pdf.counts"])
def test_8_convert_checks_its_side_files_before_writing(work, side):
    (work / "k" / side).mkdir(parents=True)
    result = run("psgd.kaldi", "convert", "m.npz", "k/final.nnet", cwd=work)
    assert_one_line(result, "psgd.kaldi convert",
                    "k/%s (written beside k/final.nnet) is a directory" % side)
    assert os.listdir(str(work / "k")) == [side]


# 9: output-path problems are one line, not a traceback -----------------------------------
@pytest.mark.parametrize("where,needle", [
    ("DIR", "DIR is a directory"),
    ("f.scp/x", "f.scp/x: %s is not a directory"),
], ids=["a directory", "under a file"])
@pytest.mark.parametrize("prog", ["psgd.kaldi convert", FORWARD])
def test_9_an_output_path_problem_is_one_line(work, prog, where, needle):
    (work / "DIR").mkdir()
    needle = needle.replace("%s", str(work / "f.scp"))
    if prog == FORWARD:
        result = forward(work, "ark:" + where)
    else:
        result = run("psgd.kaldi", "convert", "final.nnet", where, cwd=work)
    assert_one_line(result, prog, needle)


@pytest.mark.parametrize("prog", ["psgd.kaldi convert", FORWARD])
def test_9_21_a_full_disk_is_one_line_naming_the_file(work, prog):
    (work / "full").mkdir()
    (work / "full" / "out").write_text("the user's file")
    if prog == FORWARD:
        argv = [FORWARD, "--feature-transform", REAL_FT, "final.nnet", "scp:f.scp",
                "ark:full/out"]
    else:
        argv = ["psgd.kaldi", "convert", "final.nnet", "full/out"]
    result = tool(DISK_FULL, "full", *argv, cwd=work)
    assert_one_line(result, prog, "cannot write full/out: No space left on device")
    assert (work / "full" / "out").read_text() == "the user's file"
    assert os.listdir(str(work / "full")) == ["out"]


@pytest.mark.parametrize("out,needle", [
    ("ark:f.ark", "f.ark would replace the input FEATS scp:f.scp"),
    ("ark,scp:o.ark,f.scp", "f.scp would replace the input FEATS scp:f.scp"),
    ("ark:final.nnet", "final.nnet would replace the input MODEL final.nnet"),
], ids=["the features", "their index", "the model"])
def test_9_forward_never_writes_over_its_inputs(work, out, needle):
    before = (work / "f.ark").read_bytes()
    assert_one_line(forward(work, out), FORWARD, needle)
    assert (work / "f.ark").read_bytes() == before


# 10: a transform that does not feed the model; counts of the wrong length ------------------
def test_10_forward_refuses_a_transform_that_does_not_feed_the_model(work):
    result = run(FORWARD, "--feature-transform", REAL_FT, "small.nnet", "scp:f.scp",
                 "ark:o.ark", cwd=work)
    assert_one_line(result, FORWARD, "%s gives features of dimension 440, but small.nnet "
                                     "takes 40" % REAL_FT)
    assert not os.path.exists(str(work / "o.ark"))


@pytest.mark.parametrize("flags,needle", [
    (["--feature-transform", REAL_FT], "%s gives features of dimension 440, but small.nnet "
                                       "takes 40" % REAL_FT),
    (["--class-frame-counts", "c5.counts"], "c5.counts has counts of 5 classes, but "
                                             "small.nnet has 6 outputs"),
], ids=["transform", "counts"])
def test_10_convert_refuses_to_store_extras_that_do_not_fit(work, flags, needle):
    result = run("psgd.kaldi", "convert", "small.nnet", "o.npz", *flags, cwd=work)
    assert_one_line(result, "psgd.kaldi convert", needle)
    assert not os.path.exists(str(work / "o.npz"))


# 11: Kaldi's wspecifiers ------------------------------------------------------------------
def test_11_ark_dash_writes_the_archive_to_stdout(work):
    import io
    import kaldiio
    result = tool("-m", FORWARD, "--feature-transform", REAL_FT, "final.nnet", "scp:f.scp",
                  "ark:-", cwd=work, text=False)
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(str(work / "-"))
    got = dict(kaldiio.load_ark(io.BytesIO(result.stdout)))
    want = reference(work)
    assert sorted(got) == ["u1", "u2"]
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_11_ark_t_writes_text(work):
    import kaldiio
    result = forward(work, "ark,t:t.ark")
    assert result.returncode == 0, result.stderr
    text = (work / "t.ark").read_bytes()
    assert text.startswith(b"u1  [\n") and b"\0" not in text
    want = reference(work)
    got = dict(kaldiio.load_ark(str(work / "t.ark")))
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6)


def test_11_ark_scp_writes_both_and_refuses_one_file_for_both(work):
    result = forward(work, "ark,scp:o.ark,o.ark")
    assert_one_line(result, FORWARD, "ark,scp:o.ark,o.ark: the archive and its index are one "
                                     "file")
    assert not os.path.exists(str(work / "o.ark"))
    result = forward(work, "ark,scp:o.ark,o.scp")
    assert result.returncode == 0, result.stderr
    index = (work / "o.scp").read_text().splitlines()
    assert [line.split(":")[0] for line in index] == ["u1 o.ark", "u2 o.ark"]
    assert not [n for n in os.listdir(str(work)) if n.startswith(".tmp-")]


@pytest.mark.parametrize("wspec,needle", [
    ("scp,ark:a,b", "options in the wrong order"),
    ("ark,x:o.ark", "unknown option 'x'"),
    ("ark:|gzip -c", "output pipes are not supported"),
    ("scp:o.scp", "scp: alone"),
    ("ark,scp:o.ark", "ark,scp takes two names"),
])
def test_11_a_wspecifier_kaldi_would_not_take_is_one_line(work, wspec, needle):
    assert_one_line(forward(work, wspec), FORWARD, needle)


# 12: priors that make every output NaN ------------------------------------------------------
@pytest.mark.parametrize("flags,needle", [
    (["--prior-scale", "nan"], "argument --prior-scale: 'nan' is not a finite number"),
    (["--prior-scale", "inf"], "argument --prior-scale: 'inf' is not a finite number"),
    (["--prior-cutoff", "-1"], "--prior-cutoff must be > 0, got -1.0"),
    (["--prior-cutoff", "nan"], "argument --prior-cutoff: 'nan' is not a finite number"),
])
def test_12_priors_that_give_nan_are_refused(work, flags, needle):
    result = forward(work, "ark:o.ark", "--class-frame-counts", "c6.counts", *flags)
    assert_one_line(result, FORWARD, needle)
    assert not os.path.exists(str(work / "o.ark"))


@pytest.mark.parametrize("counts", ["[ 3 -1 4 1 5 9 ]", "[ 0 0 0 0 0 0 ]", "[ 3 nan 4 1 5 9 ]"])
def test_12_counts_that_are_no_counts_are_refused(work, counts):
    (work / "bad.counts").write_text(counts + "\n")
    result = forward(work, "ark:o.ark", "--class-frame-counts", "bad.counts")
    assert_one_line(result, FORWARD, "bad.counts: class frame counts must be finite, >= 0 and "
                                     "not all 0")


# 13: a hand-edited .npz header ---------------------------------------------------------------
@pytest.mark.parametrize("model,needle", [
    ("x", "malformed model header ('model' is not an object)"),
    ({"name": "mlp", "input_shape": "ab", "num_classes": 6}, "malformed model header"),
    ({"name": "mlp", "input_shape": [40], "num_classes": 6, "sizes": {"hidden": "9"}},
     "bad.npz: "),
    ({"name": "nnet9"}, "bad.npz: unknown model 'nnet9'"),
], ids=["not-an-object", "bad-shape", "wrong-sizes", "unknown-model"])
@pytest.mark.parametrize("command", ["info", "convert"])
def test_13_a_malformed_npz_header_is_one_line(work, command, model, needle):
    from psgd.nnet import build_model
    from psgd.train import model_io
    net = build_model("mlp", (40,), 6, hidden="8", seed=0)
    model_io.save(str(work / "bad.npz"), net.state_dict(), {"model": model})
    argv = ["bad.npz"] + (["o.nnet"] if command == "convert" else [])
    result = run("psgd.kaldi", command, *argv, cwd=work)
    assert_one_line(result, "psgd.kaldi " + command, needle)
    assert "bad.npz" in result.stderr

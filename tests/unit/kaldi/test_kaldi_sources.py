"""psgd's nnet1 files against Kaldi's format, not against psgd's own reader:
fixtures are item sequences that follow Kaldi's WriteData token by token
(each names the Kaldi file and function), turned into bytes and read back by
tests/kaldi_nnet1_reference.py, a reader written from Kaldi's sources alone.
psgd must read those bytes to the same values and write the same bytes."""
import numpy as np
import pytest

import kaldi_nnet1_reference as ref
from kaldi_io_reference import KaldiError, encode
from psgd.kaldi import KaldiFormatError, Layer, encode_nnet, layers_of, parse_nnet
from psgd.nnet import build_model

RNG = np.random.default_rng(24)
V3 = RNG.normal(size=3).astype(np.float32)
W23 = RNG.normal(size=(2, 3)).astype(np.float32)
B2 = RNG.normal(size=2).astype(np.float32)
ALPHA, BETA = np.array([1.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
ENDL = ("endl",)


def head(marker, out_dim, in_dim):
    """src/nnet/nnet-component.cc, Component::Write: marker, OUTPUT dim, input dim."""
    return [("token", marker), ("int32", out_dim), ("int32", in_dim), ENDL]


TAIL = [("token", "<!EndOfComponent>"), ENDL]

# (items as Kaldi writes them, the psgd Layer they are)
FIXTURES = {
    # src/nnet/nnet-various.h, Splice::WriteData -> WriteIntegerVector (io-funcs-inl.h)
    "splice": (head("<Splice>", 3, 1) + [("ivector", [-1, 0, 1])] + TAIL,
               Layer("<Splice>", 1, 3, {"offsets": [-1, 0, 1]})),
    # src/nnet/nnet-various.h, AddShift::WriteData
    "addshift": (head("<AddShift>", 3, 3) + [("token", "<LearnRateCoef>"), ("float", 0.0),
                                             ("vector", V3)] + TAIL,
                 Layer("<AddShift>", 3, 3, {"<LearnRateCoef>": 0.0}, {"shift": V3})),
    # src/nnet/nnet-various.h, Rescale::WriteData
    "rescale": (head("<Rescale>", 3, 3) + [("token", "<LearnRateCoef>"), ("float", 0.5),
                                           ("vector", V3)] + TAIL,
                Layer("<Rescale>", 3, 3, {"<LearnRateCoef>": 0.5}, {"scale": V3})),
    # src/nnet/nnet-affine-transform.h, AffineTransform::WriteData
    "affine": (head("<AffineTransform>", 2, 3)
               + [("token", "<LearnRateCoef>"), ("float", 1.0),
                  ("token", "<BiasLearnRateCoef>"), ("float", 0.5),
                  ("token", "<MaxNorm>"), ("float", 2.0), ENDL,
                  ("matrix", W23), ("vector", B2)] + TAIL,
               Layer("<AffineTransform>", 3, 2, {"<LearnRateCoef>": 1.0,
                                                 "<BiasLearnRateCoef>": 0.5, "<MaxNorm>": 2.0},
                     {"W": W23, "b": B2})),
    # src/nnet/nnet-parametric-relu.h, ParametricRelu::WriteData
    "prelu": (head("<ParametricRelu>", 2, 2)
              + [("token", "<AlphaLearnRateCoef>"), ("float", 0.25),
                 ("token", "<BetaLearnRateCoef>"), ("float", 0.0), ENDL,
                 ("vector", ALPHA), ("vector", BETA)] + TAIL,
              Layer("<ParametricRelu>", 2, 2, {"<AlphaLearnRateCoef>": 0.25,
                                               "<BetaLearnRateCoef>": 0.0},
                    {"alpha": ALPHA, "beta": BETA})),
    # src/nnet/nnet-activation.h, Dropout::WriteData
    "dropout": (head("<Dropout>", 2, 2) + [("token", "<DropoutRate>"), ("float", 0.125)]
                + TAIL, Layer("<Dropout>", 2, 2, {"<DropoutRate>": 0.125})),
    # src/nnet/nnet-activation.h: Sigmoid, Tanh, Softmax write no data
    "sigmoid": (head("<Sigmoid>", 2, 2) + TAIL, Layer("<Sigmoid>", 2, 2)),
    "tanh": (head("<Tanh>", 2, 2) + TAIL, Layer("<Tanh>", 2, 2)),
    "softmax": (head("<Softmax>", 2, 2) + TAIL, Layer("<Softmax>", 2, 2)),
}


def framed(*names):
    """src/nnet/nnet-nnet.cc, Nnet::Write: <Nnet> endl, the components, </Nnet> endl."""
    items = [("token", "<Nnet>"), ENDL]
    for name in names:
        items += FIXTURES[name][0]
    return items + [("token", "</Nnet>"), ENDL], [FIXTURES[n][1] for n in names]


WHOLE = ["splice", "addshift", "rescale", "affine", "prelu", "dropout", "sigmoid", "tanh",
         "softmax"]
CASES = [[n] for n in WHOLE] + [WHOLE]


KALDI_NAME = {"W": "linearity", "b": "bias"}     # psgd's array names -> the reference's


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    return a == b


def assert_items_equal(got, want):
    """Token by token, naming the first that differs."""
    want = [i for i in want if i != ENDL]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g[0] == w[0] and same(g[1], w[1]), "item %d: psgd %r, Kaldi %r" % (k, g, w)
    assert len(got) == len(want), (got[len(want):], want[len(got):])


def test_the_reference_rewrites_a_kaldi_written_file_byte_for_byte():
    """The reference itself: a real Kaldi-written file (tests/data/README.md)."""
    import os
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "data",
                           "kaldi_final.feature_transform"), "rb") as f:
        original = f.read()
    model, _ = ref.read_nnet(original)
    assert [c["type"] for c in model] == ["<Splice>", "<AddShift>", "<Rescale>"]
    assert ref.write_nnet(model, binary=False) == original


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
@pytest.mark.parametrize("names", CASES, ids=lambda n: "+".join(n) if len(n) < 3 else "all")
def test_psgd_writes_kaldis_bytes_token_by_token(names, binary):
    items, layers = framed(*names)
    want = encode(items, binary)
    _, want_items = ref.read_nnet(want)            # text keeps 7 digits
    got = encode_nnet(layers, binary=binary)
    _, got_items = ref.read_nnet(got)
    assert_items_equal(got_items, want_items)
    assert got == want


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
@pytest.mark.parametrize("names", CASES, ids=lambda n: "+".join(n) if len(n) < 3 else "all")
def test_psgd_reads_kaldis_bytes_to_the_same_values(names, binary):
    items, layers = framed(*names)
    data = encode(items, binary)
    kaldi, _ = ref.read_nnet(data)                 # the fixture is a valid Kaldi file
    back = parse_nnet(data, "fixture")
    assert [l.marker for l in back] == [c["type"] for c in kaldi]
    for got, want, k in zip(back, layers, kaldi):
        assert (got.input_dim, got.output_dim) == (want.input_dim, want.output_dim)
        assert got.options == want.options
        assert sorted(got.arrays) == sorted(want.arrays)
        for name in want.arrays:
            np.testing.assert_array_equal(got.arrays[name], k[KALDI_NAME.get(name, name)])
            if binary:
                np.testing.assert_array_equal(got.arrays[name], want.arrays[name])


# Older and looser files Kaldi reads, each with what psgd must make of it.
OLD = {
    # nnet-affine-transform.h before 2014 (commit 3a8d483be): no fields at all
    "affine without fields": (b"<AffineTransform> 1 2 [\n 1 2 ]\n [ 3 ]\n",
                              {"<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0,
                               "<MaxNorm>": 0.0}),
    # 2014-2016 (commit 76dbc1c71): both coefficients, no <MaxNorm>, fields re-ordered
    "affine two fields": (b"<AffineTransform> 1 2 <BiasLearnRateCoef> 3 <LearnRateCoef> 2 "
                          b"[\n 1 2 ]\n [ 3 ]\n",
                          {"<LearnRateCoef>": 2.0, "<BiasLearnRateCoef>": 3.0,
                           "<MaxNorm>": 0.0}),
    # nnet-parametric-relu.h: any order; a missing coefficient is the constructor's 0
    "prelu beta first": (b"<ParametricRelu> 2 2 <BetaLearnRateCoef> 0.5 [ 1 1 ]\n[ 0 0 ]\n",
                         {"<AlphaLearnRateCoef>": 0.0, "<BetaLearnRateCoef>": 0.5}),
    # nnet-activation.h Dropout, 2014-2016 (commit dd5b6ac6e): <DropoutRetention>
    "dropout retention": (b"<Dropout> 2 2 <DropoutRetention> 0.75 <!EndOfComponent> ",
                          {"<DropoutRate>": 0.25}),
    "dropout default": (b"<Dropout> 2 2 <!EndOfComponent> ", {"<DropoutRate>": 0.5}),
    # nnet-various.h AddShift/Rescale: <LearnRateCoef> optional, default 1
    "addshift without field": (b"<AddShift> 2 2 [ 1 2 ]\n", {"<LearnRateCoef>": 1.0}),
    "rescale without field": (b"<Rescale> 2 2 [ 1 2 ]\n", {"<LearnRateCoef>": 1.0}),
}


@pytest.mark.parametrize("name", sorted(OLD))
def test_older_kaldi_layouts_read_as_kaldi_reads_them(name):
    body, options = OLD[name]
    for data in (body, b"<Nnet>\n" + body + b"</Nnet>\n"):     # <Nnet> is optional
        kaldi, _ = ref.read_nnet(data)
        layer, = parse_nnet(data, name)
        assert layer.options == options
        assert {k: kaldi[0][k] for k in options} == pytest.approx(options)


REFUSED = {
    # a field's first letter names it; another spelling fails as ExpectToken does
    "<ParametricRelu> 2 2 <AlphaCoef> 1 [ 1 1 ]\n[ 0 0 ]\n":
        "expected <AlphaLearnRateCoef>, found <AlphaCoef>",
    "<AffineTransform> 1 1 <Zeta> 1 [ 1 ]\n[ 1 ]\n": "unknown field <Zeta>",
    # AddShift/Rescale take one optional field (an `if`, not a loop)
    "<AddShift> 1 1 <LearnRateCoef> 0 <LearnRateCoef> 0 [ 1 ]\n": "expected '['",
    "<Rescale> 1 1 <Scale> 0 [ 1 ]\n": "expected <LearnRateCoef>, found <Scale>",
    # one separator after a component, not two
    "<Sigmoid> 1 1 <!EndOfComponent> <!EndOfComponent> ": "'<!EndOfComponent>' is not",
}


@pytest.mark.parametrize("text", sorted(REFUSED))
def test_what_kaldi_refuses_psgd_refuses_in_one_line(text):
    data = b"<Nnet>\n" + text.encode() + b"</Nnet>\n"
    with pytest.raises(KaldiError):
        ref.read_nnet(data)
    with pytest.raises(KaldiFormatError) as exc:
        parse_nnet(data, "bad.nnet")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("bad.nnet: ")
    assert REFUSED[text] in str(exc.value)


def test_psgds_pre_issue_24_relu_is_not_kaldis_but_still_loads():
    """What psgd wrote before: Kaldi stops at <BiasLearnRateCoef> (first letter B
    must be <BetaLearnRateCoef>); psgd still reads its users' old models."""
    old = (b"<Nnet>\n<ParametricRelu> 2 2\n<BiasLearnRateCoef> 0 <LearnRateCoef> 0 "
           b"<ClipGradient> 0 \n [ 1 1 ]\n [ 0 0 ]\n<!EndOfComponent>\n</Nnet>\n")
    with pytest.raises(KaldiError, match="BetaLearnRateCoef"):
        ref.read_nnet(old)
    layer, = parse_nnet(old, "old.nnet")
    kaldis = head("<ParametricRelu>", 2, 2) + [
        ("token", "<AlphaLearnRateCoef>"), ("float", 0.0),
        ("token", "<BetaLearnRateCoef>"), ("float", 0.0), ENDL,
        ("vector", [1, 1]), ("vector", [0, 0])] + TAIL
    assert encode_nnet([layer], binary=False) == \
        encode([("token", "<Nnet>"), ENDL] + kaldis + [("token", "</Nnet>"), ENDL], False)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_psgd_mlp_as_nnet1_gives_the_same_posteriors_through_kaldis_reader(binary):
    net = build_model("mlp", (6,), 4, hidden="8,8", dropout=0.2, seed=2)
    for comp in net.components:
        if comp.kind == "affine":
            comp.b[...] = RNG.normal(size=comp.b.shape)
    model, items = ref.read_nnet(encode_nnet(layers_of(net), binary=binary))
    assert ("token", "<AlphaLearnRateCoef>") in items
    x = RNG.normal(size=(9, 6)).astype(np.float32)
    tol = 1e-6 if binary else 1e-5
    np.testing.assert_allclose(ref.forward(model, x), net.predict(x, batch_size=0),
                               atol=tol, rtol=0)


def april_2016_model():
    """Items as Kaldi wrote a model at commit 7de12d5d3 (2016-04-07): Nnet::Write
    as now, Component::Write without the <!EndOfComponent> separator,
    AffineTransform::WriteData without the line break before the matrix. (No
    Dropout: with no separator after it, today's Dropout::ReadData stops at the
    next marker, "Unknown token", so Kaldi itself cannot read such a file.)"""
    items = [("token", "<Nnet>"), ENDL]
    items += head("<AddShift>", 3, 3) + [("token", "<LearnRateCoef>"), ("float", 0.0),
                                         ("vector", V3)]
    items += head("<AffineTransform>", 2, 3) + [
        ("token", "<LearnRateCoef>"), ("float", 1.0), ("token", "<BiasLearnRateCoef>"),
        ("float", 1.0), ("token", "<MaxNorm>"), ("float", 0.0), ("matrix", W23),
        ("vector", B2)]
    items += head("<Sigmoid>", 2, 2)
    items += head("<Softmax>", 2, 2)
    return items + [("token", "</Nnet>"), ENDL]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_a_2016_kaldi_model_is_rewritten_as_kaldi_writes_it_now(binary):
    """What nnet-copy does to an old model: read it, write today's layout."""
    data = encode(april_2016_model(), binary)
    kaldi, _ = ref.read_nnet(data)
    layers = parse_nnet(data, "old.nnet")
    assert encode_nnet(layers, binary=binary) == ref.write_nnet(kaldi, binary=binary)

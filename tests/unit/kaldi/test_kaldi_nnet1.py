"""nnet1 models: every component through binary and text, psgd networks
through nnet1, Kaldi's reading rules, and refusals as one line."""
import numpy as np
import pytest

from psgd.kaldi import (KaldiFormatError, Layer, encode_nnet, layers_of, network_of,
                        parse_nnet, read_nnet, write_nnet)
from psgd.errors import UsageError
from psgd.nnet import AffineTransform, Network, Sigmoid, Softmax, Splice, Tanh, build_model

RNG = np.random.default_rng(5)


def every_component():
    def v(n):
        return RNG.normal(size=n).astype(np.float32)
    return [
        Layer("<Splice>", 3, 9, {"offsets": [-1, 0, 2]}),
        Layer("<AddShift>", 9, 9, {"<LearnRateCoef>": 0.0}, {"shift": v(9)}),
        Layer("<Rescale>", 9, 9, {"<LearnRateCoef>": 0.0}, {"scale": v(9)}),
        Layer("<AffineTransform>", 9, 4, {"<LearnRateCoef>": 0.5, "<BiasLearnRateCoef>": 2.0,
                                          "<MaxNorm>": 3.0},
              {"W": RNG.normal(size=(4, 9)).astype(np.float32), "b": v(4)}),
        Layer("<Sigmoid>", 4, 4),
        Layer("<Tanh>", 4, 4),
        Layer("<ParametricRelu>", 4, 4, {"<AlphaLearnRateCoef>": 0.1,
                                         "<BetaLearnRateCoef>": 0.2},
              {"alpha": v(4), "beta": v(4)}),
        Layer("<Dropout>", 4, 4, {"<DropoutRate>": 0.25}),
        Layer("<Softmax>", 4, 4),
    ]


@pytest.mark.parametrize("binary", [True, False])
def test_every_component_round_trips(binary, tmp_path):
    layers = every_component()
    path = str(tmp_path / "m.nnet")
    write_nnet(path, layers, binary=binary)
    with open(path, "rb") as f:
        assert f.read(2) == (b"\x00B" if binary else b"<N")
    back = read_nnet(path)
    assert [l.marker for l in back] == [l.marker for l in layers]
    for a, b in zip(layers, back):
        assert (a.input_dim, a.output_dim) == (b.input_dim, b.output_dim)
        assert a.options == pytest.approx(b.options) if "offsets" not in a.options \
            else a.options == b.options
        assert sorted(a.arrays) == sorted(b.arrays)
        for k in a.arrays:
            if binary:
                np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
            else:  # 7 significant digits
                np.testing.assert_allclose(a.arrays[k], b.arrays[k], rtol=1e-6, atol=1e-7)
    # text -> binary -> text is stable
    assert encode_nnet(parse_nnet(encode_nnet(back, binary), "x"), binary) == \
        encode_nnet(back, binary)


@pytest.mark.parametrize("binary", [True, False])
def test_psgd_network_round_trips_with_the_same_outputs(binary):
    net = build_model("mlp", (7,), 5, hidden="6,6", dropout=0.1, seed=3)
    for comp in net.components:
        if comp.kind == "affine":
            comp.b[...] = RNG.normal(size=comp.b.shape)
    back = network_of(parse_nnet(encode_nnet(layers_of(net), binary), "x"))
    assert [c.kind for c in back.components] == [c.kind for c in net.components]
    x = RNG.normal(size=(11, 7)).astype(np.float32)
    tol = 0 if binary else 1e-5
    np.testing.assert_allclose(back.predict(x), net.predict(x), atol=tol, rtol=0)


def test_activations_and_splice_map_both_ways():
    net = Network([Splice(2, offsets=[-1, 0, 1]), AffineTransform(6, 3), Tanh(),
                   AffineTransform(3, 3), Sigmoid(), AffineTransform(3, 2), Softmax()], seed=1)
    layers = layers_of(net)
    assert [l.marker for l in layers] == ["<Splice>", "<AffineTransform>", "<Tanh>",
                                          "<AffineTransform>", "<Sigmoid>",
                                          "<AffineTransform>", "<Softmax>"]
    back = network_of(parse_nnet(encode_nnet(layers), "x"))
    x = RNG.normal(size=(5, 2)).astype(np.float32)
    np.testing.assert_array_equal(back.predict(x, batch_size=0), net.predict(x, batch_size=0))


def test_relu_is_parametric_relu_with_alpha_one_beta_zero_frozen():
    net = build_model("mlp", (3,), 2, hidden="4", dropout=0)
    relu = [l for l in layers_of(net) if l.marker == "<ParametricRelu>"][0]
    assert relu.arrays["alpha"].tolist() == [1] * 4 and relu.arrays["beta"].tolist() == [0] * 4
    assert relu.options == {"<AlphaLearnRateCoef>": 0, "<BetaLearnRateCoef>": 0}


def test_reading_follows_kaldi_rules():
    """No <Nnet>, no </Nnet>, no <!EndOfComponent>, markers in any case."""
    text = b"<affinetransform> 1 2\n [\n 1 2 ]\n [ 3 ]\n<SIGMOID> 1 1\n"
    layers = parse_nnet(text, "old")
    assert [l.marker for l in layers] == ["<AffineTransform>", "<Sigmoid>"]
    assert layers[0].options["<LearnRateCoef>"] == 1.0   # Kaldi's defaults when absent
    assert layers[0].arrays["W"].tolist() == [[1, 2]]


def test_old_dropout_retention_is_converted():
    layers = parse_nnet(b"<Nnet> <Dropout> 3 3 <DropoutRetention> 0.75 <!EndOfComponent> "
                        b"</Nnet>", "old")
    assert layers[0].options["<DropoutRate>"] == pytest.approx(0.25)


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("marker", ["<LstmProjected>", "<Convolutional2DComponent>",
                                    "<Rbm>", "<BlockSoftmax>"])
def test_unrepresentable_component_is_refused_by_name(marker):
    text = ("<Nnet>\n<AffineTransform> 2 2\n [\n 1 0\n 0 1 ]\n [ 0 0 ]\n<!EndOfComponent>\n"
            "%s 2 2\n<CellDim> 4 \n</Nnet>\n" % marker).encode()
    with pytest.raises(KaldiFormatError) as exc:
        parse_nnet(text, "kaldi.nnet")
    assert "kaldi.nnet: component 2 %s has no psgd form" % marker in one_line(exc)


def test_unknown_marker_and_unknown_field_are_one_line():
    with pytest.raises(KaldiFormatError) as exc:
        parse_nnet(b"<Nnet> <Frobnicate> 2 2 </Nnet>", "x.nnet")
    assert "'<Frobnicate>' is not an nnet1 component marker" in one_line(exc)
    with pytest.raises(KaldiFormatError) as exc:
        parse_nnet(b"<Nnet> <AffineTransform> 1 1 <Zogus> 1 [ 1 ] [ 1 ] </Nnet>", "x.nnet")
    assert "component 1 <AffineTransform>: unknown field <Zogus>" in one_line(exc)
    # Kaldi tells a field by its first letter: a B-token must be <BiasLearnRateCoef>
    with pytest.raises(KaldiFormatError) as exc:
        parse_nnet(b"<Nnet> <AffineTransform> 1 1 <Bogus> 1 [ 1 ] [ 1 ] </Nnet>", "x.nnet")
    assert "component 1 <AffineTransform>: expected <BiasLearnRateCoef>, found <Bogus>" \
        in one_line(exc)


def test_parametric_relu_psgd_cannot_represent_is_refused():
    layers = [Layer("<ParametricRelu>", 2, 2, {}, {"alpha": np.ones(2, np.float32),
                                                    "beta": np.full(2, 0.25, np.float32)})]
    with pytest.raises(UsageError) as exc:
        network_of(layers, name="p.nnet")
    assert "p.nnet: component 1 <ParametricRelu> has alpha != 1 or beta != 0" in one_line(exc)


def test_psgd_layers_without_nnet1_form_are_refused_by_name():
    net = build_model("cnn", (1, 8), 2, channels="2", hidden="4")
    with pytest.raises(UsageError) as exc:
        layers_of(net, name="--out m.nnet")
    assert "--out m.nnet: layer 0 Reshape" in one_line(exc) or \
        "--out m.nnet: layer 0 Conv1d" in one_line(exc)
    assert "has no nnet1 form" in one_line(exc)


def test_dimension_mismatch_between_components_is_refused():
    with pytest.raises(KaldiFormatError) as exc:
        parse_nnet(b"<Nnet> <Sigmoid> 3 3 <Softmax> 4 4 </Nnet>", "d.nnet")
    assert "component 2 <Softmax> takes 4 inputs but component 1 gives 3" in one_line(exc)


def test_every_truncation_of_a_binary_model_is_one_clear_line():
    data = encode_nnet(every_component(), binary=True)
    for cut in range(3, len(data)):
        with pytest.raises(KaldiFormatError) as exc:
            parse_nnet(data[:cut], "cut.nnet")
        text = one_line(exc)
        assert text.startswith("cut.nnet: ") and "truncated" in text, (cut, text)


def test_missing_file_and_empty_file_are_one_line(tmp_path):
    with pytest.raises(KaldiFormatError, match="no such file"):
        read_nnet(str(tmp_path / "absent.nnet"))
    (tmp_path / "empty.nnet").write_bytes(b"")
    with pytest.raises(KaldiFormatError, match="empty file"):
        read_nnet(str(tmp_path / "empty.nnet"))

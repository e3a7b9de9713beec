"""Kaldi's binary and text encodings, byte for byte (src/base/io-funcs.cc,
src/matrix/kaldi-matrix.cc, kaldi-vector.cc)."""
import numpy as np
import pytest

from psgd.kaldi import KaldiFormatError, Layer, encode_nnet, parse_nnet
from psgd.kaldi_io.encoding import Reader, Writer


def tiny_layers():
    return [Layer("<AffineTransform>", 2, 1,
                  {"<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0, "<MaxNorm>": 0.0},
                  {"W": np.array([[1.0, -2.0]], np.float32), "b": np.array([0.5], np.float32)}),
            Layer("<Sigmoid>", 1, 1)]


# Derived by hand from Kaldi's writers: "\0B" header; a token is its characters and
# one space; an int32 is the size byte 0x04 then 4 bytes little-endian; a float the
# size byte 0x04 then IEEE single; a matrix "FM " rows cols data; a vector "FV " dim
# data; a component's header gives the OUTPUT dimension first.
ONE = b"\x01\x00\x00\x00"
TWO = b"\x02\x00\x00\x00"
F_ONE, F_MINUS_TWO, F_HALF, F_ZERO = (b"\x00\x00\x80\x3f", b"\x00\x00\x00\xc0",
                                      b"\x00\x00\x00\x3f", b"\x00\x00\x00\x00")
TINY_BINARY = (
    b"\x00B" + b"<Nnet> "
    + b"<AffineTransform> " + b"\x04" + ONE + b"\x04" + TWO
    + b"<LearnRateCoef> " + b"\x04" + F_ONE
    + b"<BiasLearnRateCoef> " + b"\x04" + F_ONE
    + b"<MaxNorm> " + b"\x04" + F_ZERO
    + b"FM " + b"\x04" + ONE + b"\x04" + TWO + F_ONE + F_MINUS_TWO
    + b"FV " + b"\x04" + ONE + F_HALF
    + b"<!EndOfComponent> "
    + b"<Sigmoid> " + b"\x04" + ONE + b"\x04" + ONE + b"<!EndOfComponent> "
    + b"</Nnet> ")

TINY_TEXT = (
    "<Nnet> \n"
    "<AffineTransform> 1 2 \n"
    "<LearnRateCoef> 1 <BiasLearnRateCoef> 1 <MaxNorm> 0 \n"
    " [\n  1 -2 ]\n"
    " [ 0.5 ]\n"
    "<!EndOfComponent> \n"
    "<Sigmoid> 1 1 \n"
    "<!EndOfComponent> \n"
    "</Nnet> \n").encode()


def test_binary_bytes_match_kaldis_format():
    assert encode_nnet(tiny_layers(), binary=True) == TINY_BINARY


def test_text_matches_kaldis_format():
    assert encode_nnet(tiny_layers(), binary=False) == TINY_TEXT


@pytest.mark.parametrize("data", [TINY_BINARY, TINY_TEXT])
def test_hand_derived_files_read_back(data):
    layers = parse_nnet(data, "tiny")
    assert [l.marker for l in layers] == ["<AffineTransform>", "<Sigmoid>"]
    np.testing.assert_array_equal(layers[0].arrays["W"], [[1.0, -2.0]])
    np.testing.assert_array_equal(layers[0].arrays["b"], [0.5])
    assert (layers[0].input_dim, layers[0].output_dim) == (2, 1)


def test_integer_vector_has_no_size_byte_before_its_count():
    w = Writer(binary=True, header=False)
    w.int_vector([-1, 0, 1])
    assert w.getvalue() == (b"\x04" + b"\x03\x00\x00\x00" + b"\xff\xff\xff\xff"
                            + b"\x00\x00\x00\x00" + ONE)
    w = Writer(binary=False)
    w.int_vector([-1, 0, 1])
    assert w.getvalue() == b"[ -1 0 1 ]\n"


def test_text_floats_have_seven_significant_digits():
    w = Writer(binary=False)
    w.vector([1.0 / 3, 1e-5, -2.5e10, 0.0])
    assert w.getvalue() == b" [ 0.3333333 1e-05 -2.5e+10 0 ]\n"


def test_double_matrices_and_vectors_are_read_as_float():
    data = (b"\x00BDM " + b"\x04" + ONE + b"\x04" + ONE + np.float64(2.5).tobytes()
            + b"DV " + b"\x04" + ONE + np.float64(-1.0).tobytes())
    r = Reader(data, "doubles")
    assert r.matrix().tolist() == [[2.5]]
    assert r.vector().tolist() == [-1.0]


def test_wrong_integer_size_byte_is_one_line():
    r = Reader(b"\x00B\x08" + b"\x00" * 8, "f")
    with pytest.raises(KaldiFormatError, match="size byte 4"):
        r.int32()

"""String operators against onnxruntime on random strings, plus type relations."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kiln.errors import TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir import ANY, SizeVar, TensorType, Var
from kiln.op import get_op
from kiln.op.interpreter import evaluate
from kiln.op.string import RegexFullMatchAttrs, StringNormalizerAttrs, StringSplitAttrs, strings

ort = pytest.importorskip("onnxruntime")
S = TensorProto.STRING
WORDS = ["", "a", "Monday", "tuesday", "  spaced  out ", "x,y,,z", "héllo wörld", "ab12", "foo@bar.com"]


def random_strings(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return strings(np.array(WORDS, dtype=object)[rng.integers(0, len(WORDS), shape)])


def check_vs_ort(node, feeds: dict, out_types, opset=21):
    """Run one node in Kiln and onnxruntime and compare every output exactly."""
    ins = [helper.make_tensor_value_info(k, S if v.dtype == object else TensorProto.INT64, v.shape)
           for k, v in feeds.items()]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(node.output, out_types)]
    for o in outs:
        o.type.tensor_type.shape.SetInParent()
    model = helper.make_model(helper.make_graph([node], "g", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    ours = evaluate(from_onnx(model), feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for o, r in zip(ours, ref):
        assert o.shape == r.shape
        if r.dtype == object:
            assert o.dtype == object and o.tolist() == r.tolist()
        else:
            assert o.dtype == r.dtype
            np.testing.assert_allclose(o, r)


@pytest.mark.parametrize("sx,sy", [((3, 1), (1, 4)), ((), (5,)), ((2, 7), (2, 7)), ((1,), ())])
def test_string_concat(sx, sy):
    check_vs_ort(helper.make_node("StringConcat", ["x", "y"], ["z"]),
                 {"x": random_strings(sx, 1), "y": random_strings(sy, 2)}, [S])


@pytest.mark.parametrize("pattern", [r"[a-z]+", r".*@.*\.com", r"\w+\s*", r""])
def test_regex_full_match(pattern):
    check_vs_ort(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern),
                 {"x": random_strings((3, 5))}, [TensorProto.BOOL])


@pytest.mark.parametrize("kw", [{}, {"delimiter": ","}, {"delimiter": ",", "maxsplit": 1}, {"maxsplit": 0},
                                {"delimiter": "  "}])
def test_string_split(kw):
    x = random_strings((2, 13))
    x[x == ""] = "a,"  # "" with a delimiter: 1 substring for ONNX's reference, 0 for onnxruntime
    check_vs_ort(helper.make_node("StringSplit", ["x"], ["y", "n"], **kw), {"x": x}, [S, TensorProto.INT64])


def test_string_split_empty_strings():
    y, n = get_op("string.string_split").reference(StringSplitAttrs(","), strings(["", "a,"]))
    assert y.tolist() == [["", ""], ["a", ""]] and n.tolist() == [1, 2]
    y, n = get_op("string.string_split").reference(StringSplitAttrs(), strings([[" "], [" a  b "]]))
    assert y.shape == (2, 1, 2) and n.tolist() == [[0], [2]]


@pytest.mark.parametrize("shape", [(11,), (1, 7)])
@pytest.mark.parametrize("kw", [{"case_change_action": "LOWER", "stopwords": ["monday", "a"]},
                                {"case_change_action": "UPPER", "is_case_sensitive": 1, "stopwords": ["Monday"]},
                                {"case_change_action": "NONE"},
                                {"stopwords": WORDS}])
def test_string_normalizer(shape, kw):
    node = helper.make_node("StringNormalizer", ["x"], ["y"], locale="C.UTF-8", **kw)  # ORT's default needs en_US
    check_vs_ort(node, {"x": random_strings(shape, 3)}, [S])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("skip,lo,hi", [(0, 1, 1), (0, 2, 2), (3, 1, 2), (5, 2, 3)])
def test_tfidf_vectorizer_ints(mode, skip, lo, hi):
    pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 4, 5, 6]  # four 1-grams, four 2-grams, one 3-gram
    counts, n_grams = [0, 4, 12], 9
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lo, max_gram_length=hi,
                            max_skip_count=skip, ngram_counts=counts, ngram_indexes=list(range(n_grams))[::-1],
                            pool_int64s=pool, weights=[0.5 + i for i in range(n_grams)])
    x = np.random.default_rng(skip).integers(2, 9, (3, 17)).astype(np.int64)
    check_vs_ort(node, {"x": x}, [TensorProto.FLOAT])


def test_tfidf_vectorizer_strings_1d():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=1, ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4],
                            pool_strings=["a", "Monday", "", "a", "Monday", "ab12", "a"])
    check_vs_ort(node, {"x": random_strings((23,), 4)}, [TensorProto.FLOAT])


def test_type_relations():
    n = SizeVar("N")
    x = Var("x", TensorType((n, 3), "string"))
    assert get_op("string.regex_full_match")(x, pattern="a+").type == TensorType((n, 3), "bool")
    y, count = get_op("string.string_split")(x, attrs=StringSplitAttrs()).type.fields
    assert y == TensorType((n, 3, ANY), "string") and count == TensorType((n, 3), "int64")
    row = Var("row", TensorType((1, n), "string"))
    assert get_op("string.string_normalizer")(row, stopwords=("a",)).type == TensorType((1, ANY), "string")
    assert get_op("string.string_normalizer")(row).type == row.type
    assert get_op("string.string_concat")(x, Var("z", TensorType((1,), "string"))).type == x.type
    with pytest.raises(TypeInferenceError, match="string"):
        get_op("string.string_concat")(x, Var("w", TensorType((3,), "float32")))
    with pytest.raises(TypeInferenceError, match="regular expression"):
        get_op("string.regex_full_match")(x, attrs=RegexFullMatchAttrs("(unclosed"))
    with pytest.raises(TypeInferenceError, match=r"\[1, C\]"):
        get_op("string.string_normalizer")(x, attrs=StringNormalizerAttrs())

"""The vision family: Resize / GridSample / AffineGrid / RoiAlign / NMS vs onnxruntime on random
inputs, ImageDecoder on streams encoded here, and type relations."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln.onnx_backend
from kiln.errors import EvaluationError, TypeInferenceError
from kiln.ir.expr import Constant, Var, absent
from kiln.ir.types import ANY, SizeVar, TensorType
from kiln.op.interpreter import run_op
from kiln.op.registry import get_op
from tests.helpers import model

ort = pytest.importorskip("onnxruntime")
ORT_UNSUPPORTED = (ort.capi.onnxruntime_pybind11_state.NotImplemented, ort.capi.onnxruntime_pybind11_state.Fail)
N = SizeVar("N")
RNG = np.random.default_rng(3)
F32 = lambda v: np.array(v, np.float32)
I64 = lambda v: np.array(v, np.int64)


def run(name: str, *args, **attrs):
    op = get_op(name)
    return run_op(op, op.attrs_type(**attrs), list(args))


def infer(name: str, *args, **attrs):
    """Output type on inputs given as TensorTypes (Vars), arrays (Constants) or None (omitted)."""
    exprs = tuple(absent() if a is None else Constant(a) if isinstance(a, np.ndarray) else Var(f"x{i}", a)
                  for i, a in enumerate(args))
    return get_op(name)(*exprs, **attrs).type


def both(op_type: str, feeds: dict, out_type: int = TensorProto.FLOAT, opset: int = 21, **attrs):
    """(Kiln, onnxruntime) outputs of a one-node model; None feeds are omitted inputs."""
    real = {k: v for k, v in feeds.items() if v is not None}
    ins = [(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in real.items()]
    node = helper.make_node(op_type, [k if v is not None else "" for k, v in feeds.items()], ["y"], **attrs)
    m = model([node], ins, [("y", out_type, None)], opset=opset)
    try:
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, real)[0]
    except ORT_UNSUPPORTED as e:  # ORT lacks this variant (e.g. cubic over 3 axes): nothing to compare with
        pytest.skip(f"onnxruntime: {str(e)[:160]}")
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", out_type, want.shape))
    return kiln.onnx_backend.prepare(m).run(real)[0], want


# ---------------------------------------------------------------------------------------------
# Resize

COORD = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]
RESIZE_CASES = [
    # (input shape, scales, sizes, extra attrs)
    ((1, 2, 5, 7), [1, 1, 2.0, 1.5], None, {}),
    ((2, 1, 13, 4), [1, 1, 0.5, 0.8], None, {}),
    ((1, 3, 6, 6), None, [1, 3, 1, 11], {}),
    ((1, 1, 9, 11), None, [1, 1, 4, 3], {}),
    ((3, 4, 7), None, [4, 3], {"axes": [2, 0]}),
    ((1, 1, 8, 5), [0.6, 1.7], None, {"axes": [2, -1]}),
    ((1, 1, 10, 6), None, [5, 5], {"keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]}),
    ((1, 1, 10, 6), None, [5, 5], {"keep_aspect_ratio_policy": "not_smaller", "axes": [2, 3]}),
]


@pytest.mark.parametrize("shape,scales,sizes,extra", RESIZE_CASES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_matches_onnxruntime(shape, scales, sizes, extra, mode):
    x = RNG.normal(size=shape).astype(np.float32)
    for coord in COORD:
        if coord == "align_corners" and (scales is not None or "keep_aspect_ratio_policy" in extra):
            continue  # ORT uses the integer output length there; see test_resize_align_corners_fractional
        attrs = dict(extra, mode=mode, coordinate_transformation_mode=coord)
        feeds = {"x": x, "roi": None, "scales": None if scales is None else F32(scales),
                 "sizes": None if sizes is None else I64(sizes)}
        got, want = both("Resize", feeds, opset=19, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(attrs))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes(nearest_mode):
    x = RNG.normal(size=(1, 1, 4, 6)).astype(np.float32)
    for scales in ([1, 1, 2.5, 0.5], [1, 1, 1.5, 3.0]):
        got, want = both("Resize", {"x": x, "roi": None, "scales": F32(scales)}, opset=19, mode="nearest",
                         nearest_mode=nearest_mode, coordinate_transformation_mode="asymmetric")
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_and_exclude_outside(mode):
    x = RNG.normal(size=(1, 2, 17, 11)).astype(np.float32)
    for attrs in ({"antialias": 1}, {"antialias": 1, "exclude_outside": 1, "cubic_coeff_a": -0.5}):
        got, want = both("Resize", {"x": x, "roi": None, "scales": F32([1, 1, 0.4, 0.7])}, opset=19, mode=mode, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(attrs))


def test_resize_tf_crop_and_resize():
    x = RNG.normal(size=(1, 1, 6, 8)).astype(np.float32)
    roi = F32([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3])
    for mode in ("nearest", "linear", "cubic"):
        got, want = both("Resize", {"x": x, "roi": roi, "scales": None, "sizes": I64([1, 1, 4, 5])}, opset=19,
                         mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=mode)


def test_resize_align_corners_fractional():
    """With scales, the ONNX spec maps align_corners through the fractional length scale * n."""
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4) ** 2
    got = run("vision.resize", x, None, F32([1, 1, 1, 0.6]), mode="linear",
              coordinate_transformation_mode="align_corners")
    pos = np.array([0, 3 / 1.4])
    np.testing.assert_allclose(got[0, 0, 0], np.interp(pos, np.arange(4), x[0, 0, 0]), rtol=1e-6)


def test_resize_uint8_rounds_and_saturates():
    x = np.array([[[[0, 255], [255, 0]]]], np.uint8)
    got = run("vision.resize", x, None, F32([1, 1, 2, 2]), mode="cubic")
    ref = run("vision.resize", x.astype(np.float64), None, F32([1, 1, 2, 2]), mode="cubic")
    np.testing.assert_array_equal(got, np.clip(np.rint(ref), 0, 255))


def test_upsample_and_resize10_use_asymmetric_floor():
    x = RNG.normal(size=(1, 1, 3, 4)).astype(np.float32)
    got, want = both("Upsample", {"x": x, "s": F32([1, 1, 2, 1.5])}, opset=9, mode="nearest")
    np.testing.assert_array_equal(got, want)
    got, want = both("Resize", {"x": x, "s": F32([1, 1, 1.7, 2])}, opset=10, mode="linear")
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_resize_type_relation():
    x = TensorType((N, 3, 8, 8), "float32")
    assert infer("vision.resize", x, None, F32([1, 1, 0.5, 2])) == TensorType((N, 3, 4, 16), "float32")
    assert infer("vision.resize", x, None, None, I64([5, 7]), axes=(2, 3)).shape == (N, 3, 5, 7)
    assert infer("vision.resize", x, None, None, I64([4, 4]), axes=(-2, -1),
                 keep_aspect_ratio_policy="not_larger").shape == (N, 3, 4, 4)
    assert infer("vision.resize", x, None, TensorType((4,), "float32")).shape == (ANY,) * 4
    assert infer("vision.resize", x, None, None, TensorType((2,), "int64"), axes=(2, 3)).shape == (N, 3, ANY, ANY)
    assert infer("vision.resize", x, F32([]), F32([])
                 , I64([1, 3, 2, 2])).shape == (1, 3, 2, 2)  # old opsets pass empty scales
    with pytest.raises(TypeInferenceError, match="exactly one"):
        infer("vision.resize", x, None, F32([1, 1, 2, 2]), I64([1, 3, 2, 2]))
    with pytest.raises(TypeInferenceError, match="entries"):
        infer("vision.resize", x, None, F32([2, 2]))
    with pytest.raises(TypeInferenceError, match="antialias"):
        infer("vision.resize", x, None, F32([1, 1, 2, 2]), antialias=1)


# ---------------------------------------------------------------------------------------------
# GridSample / AffineGrid


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d_matches_onnxruntime(mode, padding, align):
    x = RNG.normal(size=(2, 3, 5, 7)).astype(np.float32)
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 11, 2)).astype(np.float32)
    got, want = both("GridSample", {"x": x, "g": grid}, opset=20, mode=mode, padding_mode=padding, align_corners=align)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d_matches_onnxruntime(mode):
    x = RNG.normal(size=(1, 2, 3, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.2, 1.2, (1, 2, 3, 6, 3)).astype(np.float32)
    got, want = both("GridSample", {"x": x, "g": grid}, opset=20, mode=mode, padding_mode="border")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grid_sample_opset16_names_and_types():
    x = RNG.normal(size=(1, 1, 4, 4)).astype(np.float32)
    grid = RNG.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)
    got, want = both("GridSample", {"x": x, "g": grid}, opset=16, mode="bicubic")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert infer("vision.grid_sample", TensorType((N, 3, 8, 8), "uint8"), TensorType((N, 5, 6, 2), "float32")) \
        == TensorType((N, 3, 5, 6), "uint8")
    with pytest.raises(TypeInferenceError, match="spatial dims"):
        infer("vision.grid_sample", TensorType((1, 3, 8, 8), "float32"), TensorType((1, 5, 6, 3), "float32"))


@pytest.mark.parametrize("size", [[2, 3, 5, 7], [1, 1, 1, 4], [2, 1, 3, 4, 5]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_onnxruntime(size, align):
    r = len(size) - 2
    theta = RNG.normal(size=(size[0], r, r + 1)).astype(np.float32)
    if size[2] == 1 and align:
        pytest.skip("a 1-pixel axis sits at 0 as in torch; ONNX Runtime puts it at 1, onnx.reference at -1")
    got, want = both("AffineGrid", {"t": theta, "s": I64(size)}, opset=20, align_corners=align)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_affine_grid_type_relation():
    t = TensorType((N, 2, 3), "float32")
    assert infer("vision.affine_grid", t, I64([2, 3, 5, 7])) == TensorType((N, 5, 7, 2), "float32")
    assert infer("vision.affine_grid", t, TensorType((4,), "int64")) == TensorType((N, ANY, ANY, 2), "float32")
    with pytest.raises(TypeInferenceError, match="does not fit"):
        infer("vision.affine_grid", t, I64([2, 3, 4, 5, 7]))


# ---------------------------------------------------------------------------------------------
# RoiAlign / NonMaxSuppression


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_onnxruntime(mode, coord, ratio):
    x = RNG.normal(size=(2, 3, 11, 13)).astype(np.float32)
    rois = F32([[0, 0, 12, 10], [2.5, 1.2, 7.3, 9.9], [-3, -2, 4, 3], [5, 5, 5.5, 5.2], [10, 8, 20, 15]])
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "sampling_ratio": ratio, "output_height": 3,
                 "output_width": 4, "spatial_scale": 0.9}
    got, want = both("RoiAlign", {"x": x, "r": rois, "b": I64([0, 1, 1, 0, 1])}, opset=16, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_roi_align_type_relation():
    t = infer("vision.roi_align", TensorType((N, 3, 8, 8), "float32"), TensorType((SizeVar("R"), 4), "float32"),
              TensorType((SizeVar("R"),), "int64"), output_height=2, output_width=5)
    assert t == TensorType((SizeVar("R"), 3, 2, 5), "float32")
    with pytest.raises(TypeInferenceError, match="rois"):
        infer("vision.roi_align", TensorType((1, 3, 8, 8), "float32"), TensorType((2, 5), "float32"),
              TensorType((2,), "int64"))


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limit,iou,score", [(3, 0.5, None), (10, 0.3, 0.2), (1, 0.0, 0.5), (0, 0.5, None)])
def test_nms_matches_onnxruntime(center, limit, iou, score):
    boxes = RNG.uniform(0, 10, (2, 17, 4)).astype(np.float32)
    boxes[0, 5] = boxes[0, 4]  # identical boxes
    scores = RNG.uniform(0, 1, (2, 3, 17)).astype(np.float32)
    scores[1, 0, 3] = scores[1, 0, 8]  # a tie
    feeds = {"b": boxes, "s": scores, "m": I64([limit]), "i": F32([iou]),
             "t": None if score is None else F32([score])}
    got, want = both("NonMaxSuppression", feeds, TensorProto.INT64, center_point_box=center)
    np.testing.assert_array_equal(got, want)


def test_nms_type_relation_and_defaults():
    t = infer("vision.non_max_suppression", TensorType((N, 5, 4), "float32"), TensorType((N, 2, 5), "float32"))
    assert t == TensorType((ANY, 3), "int64")
    boxes = F32([[[0, 0, 1, 1]]])
    assert run("vision.non_max_suppression", boxes, F32([[[0.9]]])).shape == (0, 3)  # default limit 0
    with pytest.raises(TypeInferenceError, match="boxes"):
        infer("vision.non_max_suppression", TensorType((5, 4), "float32"), TensorType((1, 2, 5), "float32"))


# ---------------------------------------------------------------------------------------------
# ImageDecoder


IMG = RNG.integers(0, 256, (5, 3, 3)).astype(np.uint8)  # odd width: BMP rows need padding


def _bmp(img: np.ndarray) -> bytes:
    h, w, _ = img.shape
    stride = (w * 3 + 3) // 4 * 4
    rows = b"".join(img[y, :, ::-1].tobytes().ljust(stride, b"\0") for y in range(h - 1, -1, -1))
    return (b"BM" + struct.pack("<IHHI", 54 + len(rows), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(rows), 0, 0, 0, 0) + rows)


def _png(img: np.ndarray, filt: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    h, w, _ = img.shape
    rows, prev = [], np.zeros(w * 3, np.int64)
    for y in range(h):
        cur = img[y].reshape(-1).astype(np.int64)
        left = np.concatenate([np.zeros(3, np.int64), cur[:-3]])
        pred = {0: 0, 1: left, 2: prev, 3: (left + prev) // 2}[filt]
        rows.append(bytes([filt]) + ((cur - pred) % 256).astype(np.uint8).tobytes())
        prev = cur
    head = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")


def _decode(stream: bytes, fmt: str = "RGB") -> np.ndarray:
    return run("vision.image_decoder", np.frombuffer(stream, np.uint8), pixel_format=fmt)


@pytest.mark.parametrize("stream", [_bmp(IMG), _png(IMG, 0), _png(IMG, 1), _png(IMG, 2), _png(IMG, 3),
                                    b"P6\n# comment\n3 5\n255\n" + IMG.tobytes()], ids=lambda s: repr(s[:2]))
def test_image_decoder_round_trips(stream):
    np.testing.assert_array_equal(_decode(stream), IMG)
    np.testing.assert_array_equal(_decode(stream, "BGR"), IMG[:, :, ::-1])
    gray = _decode(stream, "Grayscale")
    assert gray.shape == (5, 3, 1)
    assert np.abs(gray[:, :, 0] - IMG @ np.array([0.299, 0.587, 0.114])).max() <= 0.6


def test_image_decoder_gray_source_and_failures():
    pgm = b"P5 3 5 255\n" + IMG[:, :, 0].tobytes()
    np.testing.assert_array_equal(_decode(pgm, "Grayscale")[:, :, 0], IMG[:, :, 0])
    np.testing.assert_array_equal(_decode(pgm), np.repeat(IMG[:, :, :1], 3, axis=2))
    assert _decode(b"not an image").shape == (0, 0, 3)
    assert _decode(_bmp(IMG)[:40], "Grayscale").shape == (0, 0, 1)
    with pytest.raises(EvaluationError, match="JPEG"):
        _decode(b"\xff\xd8\xff\xe0" + bytes(20))
    assert infer("vision.image_decoder", TensorType((N,), "uint8")) == TensorType((ANY, ANY, 3), "uint8")

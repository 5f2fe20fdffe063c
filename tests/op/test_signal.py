"""The signal family: DFT / STFT / windows / mel filters vs numpy.fft and onnxruntime; type relations."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kiln.errors import TypeInferenceError
from kiln.ir.expr import Constant, Var, absent
from kiln.ir.types import ANY, SizeVar, TensorType
from kiln.op.interpreter import run_op
from kiln.op.registry import get_op
from tests.helpers import model

ort = pytest.importorskip("onnxruntime")
N = SizeVar("N")
RNG = np.random.default_rng(1)


def run(name: str, *args, **attrs):
    op = get_op(name)
    return run_op(op, op.attrs_type(**attrs) if op.attrs_type else None, list(args))


def infer(name: str, *args, **attrs):
    """Output type on inputs given as TensorTypes (Vars), arrays (Constants) or None (omitted)."""
    exprs = tuple(absent() if a is None else Constant(a) if isinstance(a, np.ndarray) else Var(f"x{i}", a)
                  for i, a in enumerate(args))
    return get_op(name)(*exprs, **attrs).type


def ort_node(op_type: str, feeds: dict, out_type: int = TensorProto.FLOAT, opset: int = 20, **attrs):
    """Output of a one-node model under onnxruntime; empty feed names stand for omitted inputs."""
    real = {k: v for k, v in feeds.items() if v is not None}
    ins = [(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in real.items()]
    node = helper.make_node(op_type, [k if v is not None else "" for k, v in feeds.items()], ["y"], **attrs)
    m = model([node], ins, [("y", out_type, None)], opset=opset)
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, real)[0]


def as_complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


I64 = lambda v: np.array(v, np.int64)


# ---------------------------------------------------------------------------------------------
# DFT


@pytest.mark.parametrize("shape,axis,n", [((2, 7, 1), 1, None), ((3, 5, 2), -2, 8), ((1, 11, 4, 2), 1, 6),
                                           ((13, 2), 0, None), ((2, 3, 1), 0, 5)])
@pytest.mark.parametrize("inverse", [0, 1])
def test_dft_matches_numpy(shape, axis, n, inverse):
    x = RNG.normal(size=shape)
    got = run("signal.dft", x, None if n is None else I64(n), I64(axis), inverse=inverse)
    ax = axis % len(shape)
    want = (np.fft.ifft if inverse else np.fft.fft)(as_complex(x), n=n, axis=ax)
    np.testing.assert_allclose(as_complex(got), want, atol=1e-10)
    assert got.dtype == np.float64


@pytest.mark.parametrize("n", [None, 7, 10])
def test_rfft_and_irfft_match_numpy(n):
    x = RNG.normal(size=(3, 9, 1)).astype(np.float32)
    spec = run("signal.dft", x, None if n is None else I64(n), I64(1), onesided=1)
    np.testing.assert_allclose(as_complex(spec), np.fft.rfft(x[..., 0], n=n, axis=1), rtol=1e-4, atol=1e-4)
    back = run("signal.dft", spec, None if n is None else I64(n), I64(1), onesided=1, inverse=1)
    np.testing.assert_allclose(back[..., 0], np.fft.irfft(as_complex(spec), n=n, axis=1), rtol=1e-4, atol=1e-4)
    assert back.shape[-1] == 1 and back.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dft_matches_onnxruntime(dtype):
    x = RNG.normal(size=(2, 6, 2)).astype(dtype)
    want = ort_node("DFT", {"x": x, "n": I64(6), "axis": I64(1)},
                    helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), inverse=1)
    got = run("signal.dft", x, I64(6), I64(1), inverse=1)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_dft_type_relation():
    x = TensorType((N, 16, 1), "float32")
    assert infer("signal.dft", x) == TensorType((N, 16, 2), "float32")
    assert infer("signal.dft", x, I64(10), I64(1), onesided=1) == TensorType((N, 6, 2), "float32")
    assert infer("signal.dft", TensorType((N, 6, 2), "float32"), None, I64(1), onesided=1, inverse=1) \
        == TensorType((N, 10, 1), "float32")
    assert infer("signal.dft", x, TensorType((), "int64")) == TensorType((N, ANY, 2), "float32")
    assert infer("signal.dft", x, None, TensorType((), "int64")) == TensorType((ANY, ANY, 2), "float32")
    assert infer("signal.dft", TensorType((4, N, 2), "float64"), None, I64(-2)).shape == (4, N, 2)
    with pytest.raises(TypeInferenceError, match="real, imaginary"):
        infer("signal.dft", x, None, I64(2))
    with pytest.raises(TypeInferenceError, match="1 \\(real\\) or 2"):
        infer("signal.dft", TensorType((4, 3), "float32"))
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("signal.dft", TensorType((4, 1), "int32"))


# ---------------------------------------------------------------------------------------------
# STFT


@pytest.mark.parametrize("length,step,frame,window,onesided", [
    (64, 8, 16, True, 1), (37, 5, 7, False, 0), (13, 13, 13, True, 1), (20, 3, None, True, 0)])
def test_stft_matches_onnxruntime(length, step, frame, window, onesided):
    x = RNG.normal(size=(2, length, 1)).astype(np.float32)
    w = np.hanning(frame or 9).astype(np.float32) if window else None
    feeds = {"x": x, "step": I64(step), "w": w, "len": None if frame is None else I64(frame)}
    want = ort_node("STFT", feeds, onesided=onesided, opset=17)
    got = run("signal.stft", x, I64(step), w, None if frame is None else I64(frame), onesided=onesided)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_stft_complex_signal_matches_numpy():
    x = RNG.normal(size=(1, 10, 2))
    got = run("signal.stft", x, I64(3), None, I64(4), onesided=0)
    c = as_complex(x)[0]
    want = np.stack([np.fft.fft(c[f * 3:f * 3 + 4]) for f in range(3)])
    np.testing.assert_allclose(as_complex(got)[0], want, atol=1e-12)


def test_stft_type_relation():
    x = TensorType((N, 64, 1), "float32")
    w = TensorType((16,), "float32")
    assert infer("signal.stft", x, I64(8), w) == TensorType((N, 7, 9, 2), "float32")
    assert infer("signal.stft", x, I64(8), None, I64(16), onesided=0) == TensorType((N, 7, 16, 2), "float32")
    assert infer("signal.stft", x, TensorType((), "int64"), w).shape == (N, ANY, 9, 2)
    assert infer("signal.stft", TensorType((1, N, 1), "float32"), I64(4), w).shape == (1, ANY, 9, 2)
    with pytest.raises(TypeInferenceError, match="differs from frame_length"):
        infer("signal.stft", x, I64(8), w, I64(8))
    with pytest.raises(TypeInferenceError, match="exceeds"):
        infer("signal.stft", x, I64(8), None, I64(65))
    with pytest.raises(TypeInferenceError, match="batch, length"):
        infer("signal.stft", TensorType((64, 1), "float32"), I64(8))


# ---------------------------------------------------------------------------------------------
# windows and mel filters


@pytest.mark.parametrize("op,onnx_op", [("signal.hann_window", "HannWindow"),
                                        ("signal.hamming_window", "HammingWindow"),
                                        ("signal.blackman_window", "BlackmanWindow")])
@pytest.mark.parametrize("size", [1, 2, 7, 10])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_match_onnxruntime(op, onnx_op, size, periodic):
    if size == 1 and not periodic:  # ORT divides 0 by 0; a 1-point symmetric window is [1]
        np.testing.assert_array_equal(run(op, np.array(1, np.int32), periodic=0), [1.0])
        return
    want = ort_node(onnx_op, {"n": np.array(size, np.int32)}, periodic=periodic, opset=17)
    got = run(op, np.array(size, np.int32), periodic=periodic)
    assert got.dtype == np.float32 and got.shape == (size,)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_symmetric_windows_match_numpy():
    np.testing.assert_allclose(run("signal.hann_window", I64(9), periodic=0), np.hanning(9), atol=1e-7)
    np.testing.assert_allclose(run("signal.blackman_window", I64(9), periodic=0, output_datatype="float64"),
                               np.blackman(9), atol=1e-12)


def test_window_type_relation():
    assert infer("signal.hann_window", I64(5), output_datatype="float64") == TensorType((5,), "float64")
    assert infer("signal.hamming_window", TensorType((), "int32")) == TensorType((ANY,), "float32")
    with pytest.raises(TypeInferenceError, match="size"):
        infer("signal.hann_window", TensorType((), "float32"))


@pytest.mark.parametrize("bins,n,rate,lo,hi", [(8, 16, 8192, 0.0, 4096.0), (5, 31, 16000, 100.0, 7000.0),
                                               (13, 64, 22050, 20.0, 11025.0)])
def test_mel_weight_matrix_matches_onnxruntime(bins, n, rate, lo, hi):
    feeds = {"b": I64(bins), "n": I64(n), "r": I64(rate), "lo": np.array(lo, np.float32),
             "hi": np.array(hi, np.float32)}
    want = ort_node("MelWeightMatrix", feeds, opset=17)
    got = run("signal.mel_weight_matrix", *feeds.values())
    assert got.shape == (n // 2 + 1, bins)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_mel_type_relation():
    f = np.array(0.0, np.float32)
    assert infer("signal.mel_weight_matrix", I64(8), I64(16), I64(8000), f, f) == TensorType((9, 8), "float32")
    assert infer("signal.mel_weight_matrix", TensorType((), "int64"), I64(16), I64(8000), f, f).shape == (9, ANY)

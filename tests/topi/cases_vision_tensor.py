"""Registry-test cases for tensor.compress, tensor.col2im, nn.max_unpool, nn.deform_conv,
vision.affine_grid and vision.roi_align (te computes evaluated against the numpy references;
deeper variants in test_vision_tensor_computes.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def _compress(rng):
    from tests.topi.cases import A

    out = []
    for t in ("float32", "int32", "bool", "float16"):
        x = rand((3, 5, 2), t, rng)
        for axis, n in ((0, 3), (1, 5), (-1, 2), (1, 3), (None, 7), (None, 30)):
            out.append((A("tensor.compress", axis=axis), [x, rng.random(n) < 0.5], ()))
    out.append((A("tensor.compress", axis=0), [rand((1,), "float64", rng), np.array([True])], ()))
    out.append((A("tensor.compress", axis=0), [rand((7,), "float32", rng), np.zeros(7, bool)], ()))
    return out


def _col2im(rng):
    from tests.topi.cases import A

    out = []
    for t in ("float32", "float64", "int32"):
        geo = [((5, 5), (1, 5), {}), ((4, 7), (2, 3), dict(strides=(2, 1), pads=(1, 0, 0, 2), dilations=(1, 2))),
               ((7,), (3,), dict(strides=(2,), pads=(2, 1))), ((2, 3, 4), (1, 2, 3), {})]
        for image, block, kw in geo:
            A_ = A("tensor.col2im", **kw)
            r = len(image)
            dil, st = kw.get("dilations", (1,) * r), kw.get("strides", (1,) * r)
            pads = kw.get("pads", (0,) * (2 * r))
            blocks = [(image[a] + pads[a] + pads[a + r] - dil[a] * (block[a] - 1) - 1) // st[a] + 1 for a in range(r)]
            x = rand((2, 3 * int(np.prod(block)), int(np.prod(blocks))), t, rng)
            out.append((A_, [x, i64(*image), i64(*block)], (1, 2)))
    return out


def _max_unpool(rng):
    from tests.topi.cases import A

    out = []
    for t in ("float32", "int64", "float16"):
        x = rand((2, 3, 2, 3), t, rng)
        natural = (2, 3, 4, 6)
        idx = rng.permutation(int(np.prod(natural)))[:x.size].reshape(x.shape).astype(np.int64)
        idx.reshape(-1)[1] = idx.reshape(-1)[4]  # a repeated index: the last write wins
        out.append((A("nn.max_unpool", kernel_shape=(2, 2), strides=(2, 2)), [x, idx], ()))
        out.append((A("nn.max_unpool", kernel_shape=(2, 2), strides=(2, 2)), [x, idx, i64(2, 3, 5, 7)], (2,)))
        idx1 = rng.permutation(6)[:3].astype(np.int64).reshape(1, 1, 3) - 6  # negative indices count from the end
        out.append((A("nn.max_unpool", kernel_shape=(3,), strides=(2,), pads=(0, 1)), [rand((1, 1, 3), t, rng), idx1],
                    ()))
    return out


def _deform_conv(rng):
    from tests.topi.cases import A

    out = []
    for t in ("float32", "float64", "float16"):
        x, w = rand((2, 4, 5, 3), t, rng), rand((6, 2, 2, 3), t, rng)
        off = (rng.standard_normal((2, 2 * 6 * 2, 3, 1)) * 1.5).astype(t)
        mask, b = rng.random((2, 2 * 6, 3, 1)).astype(t), rand((6,), t, rng)
        kw = dict(group=2, offset_group=2, pads=(1, 0, 1, 0), strides=(2, 1), dilations=(1, 1))
        out.append((A("nn.deform_conv", **kw), [x, w, off, b, mask], ()))
        off1 = (rng.standard_normal((1, 3, 5)) * 2).astype(t)  # (N, k * 1 axis, out)
        out.append((A("nn.deform_conv", pads=(1, 1), dilations=(2,)), [rand((1, 1, 7), t, rng),
                                                                         rand((1, 1, 3), t, rng), off1], ()))
    return out


def _affine_grid(rng):
    from tests.topi.cases import A

    out = []
    for t in ("float32", "float64", "float16"):
        for ac in (0, 1):
            out.append((A("vision.affine_grid", align_corners=ac), [rand((2, 2, 3), t, rng), i64(2, 3, 5, 1)], (1,)))
            out.append((A("vision.affine_grid", align_corners=ac), [rand((1, 3, 4), t, rng), i64(1, 1, 3, 1, 7)],
                        (1,)))
    return out


def _roi_align(rng):
    from tests.topi.cases import A

    out = []
    for t in ("float32", "float64", "float16"):
        x = rand((2, 3, 7, 5), t, rng)
        rois = (rng.random((5, 4)) * np.array([6, 8, 6, 8]) - 1).astype(t)
        rois[:, 2:] = np.maximum(rois[:, 2:], rois[:, :2] + rng.random((5, 2)) * 3).astype(t)
        rois[0] = [-3, -2, 9, 11]  # samples outside the image
        idx = rng.integers(0, 2, 5).astype(np.int64)
        for mode in ("avg", "max"):
            for ctm in ("half_pixel", "output_half_pixel"):
                out.append((A("vision.roi_align", mode=mode, coordinate_transformation_mode=ctm, output_height=3,
                              output_width=2, sampling_ratio=2, spatial_scale=0.7), [x, rois, idx], ()))
        out.append((A("vision.roi_align", output_height=1, output_width=3, sampling_ratio=3), [x, rois, idx], ()))
    return out


def VISION_TENSOR_CASES() -> dict:
    return {"tensor.compress": _compress, "tensor.col2im": _col2im, "nn.max_unpool": _max_unpool,
            "nn.deform_conv": _deform_conv, "vision.affine_grid": _affine_grid, "vision.roi_align": _roi_align}

"""Registry-test cases for the blocked-layout ops alter-op-layout produces, Winograd's transforms
included (end to end through the x86 schedules: tests/topi/test_conv_x86.py, test_winograd.py)."""

from __future__ import annotations

from tests.topi.harness import rand


def _transform(rng):
    from tests.topi.cases import A

    return [(A("tensor.layout_transform", src_layout="NCHW", dst_layout="NCHW4c"), [rand((2, 8, 3, 5), "float32", rng)],
             ()),
            (A("tensor.layout_transform", src_layout="NCHW", dst_layout="NCHW4c"), [rand((1, 6, 2, 3), "float64", rng)],
             ()),  # 6 channels pad to 2 blocks of 4
            (A("tensor.layout_transform", src_layout="NCHW4c", dst_layout="NCHW", sizes=(0, 6, 0, 0)),
             [rand((1, 2, 2, 3, 4), "float32", rng)], ()),  # the padding is cropped
            (A("tensor.layout_transform", src_layout="NCHW", dst_layout="NHWC"), [rand((1, 3, 1, 7), "int32", rng)],
             ())]


def _conv(rng):
    from tests.topi.cases import A

    plain = A("nn.conv2d_nchwc", data_layout="NCHW4c", kernel_layout="OIHW4i4o", pads=(1, 1, 1, 1))
    strided = A("nn.conv2d_nchwc", data_layout="NCHW4c", kernel_layout="OIHW4i4o", strides=(2, 2),
                dilations=(1, 2))
    depthwise = A("nn.conv2d_nchwc", data_layout="NCHW4c", kernel_layout="OIHW1i4o", pads=(1, 1, 1, 1), group=8)
    return [(plain, [rand((1, 2, 5, 7, 4), "float32", rng), rand((2, 2, 3, 3, 4, 4), "float32", rng),
                     rand((2, 4), "float32", rng)], ()),
            (strided, [rand((2, 1, 9, 8, 4), "float32", rng), rand((1, 1, 3, 3, 4, 4), "float32", rng), None], ()),
            (depthwise, [rand((1, 2, 6, 5, 4), "float32", rng), rand((2, 1, 3, 3, 1, 4), "float32", rng), None], ())]


def _pool(rng):
    from tests.topi.cases import A

    x = rand((1, 2, 7, 6, 4), "float32", rng)
    return [(A("nn.pool2d_layout", mode="max", layout="NCHW4c", kernel_shape=(3, 3), strides=(2, 2),
               pads=(1, 1, 1, 1)), [x], ()),
            (A("nn.pool2d_layout", mode="average", layout="NCHW4c", kernel_shape=(2, 2), count_include_pad=1,
               pads=(0, 0, 1, 1)), [x], ()),
            (A("nn.pool2d_layout", mode="global_average", layout="NCHW4c"), [x], ())]


def _winograd_input(rng):
    from tests.topi.cases import A

    return [(A("nn.winograd_input", tile=4, pads=(1, 1, 1, 1), out=(7, 5)), [rand((1, 2, 7, 5, 4), "float32", rng)], ()),
            (A("nn.winograd_input", tile=2, pads=(0, 1, 2, 0), out=(3, 3)), [rand((2, 1, 3, 4, 3), "float32", rng)], ())]


def _winograd_output(rng):
    from tests.topi.cases import A

    return [(A("nn.winograd_output", tile=4, out=(7, 5)),
             [rand((1, 72, 2, 2, 4), "float32", rng), rand((2, 4), "float32", rng)], ()),
            (A("nn.winograd_output", tile=2, out=(3, 2)), [rand((2, 16, 2, 1, 3), "float32", rng)], ())]


def LAYOUT_CASES() -> dict:
    return {"tensor.layout_transform": _transform, "nn.conv2d_nchwc": _conv, "nn.pool2d_layout": _pool,
            "nn.winograd_input": _winograd_input, "nn.winograd_output": _winograd_output}

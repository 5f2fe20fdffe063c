"""ONNX converters for the tensor operator families (kiln/op/reshape.py, concat_slice.py, gather_scatter.py,
pad_tile.py, blocks.py, creation.py, selection.py).

Older opsets pass axes, split, pads, starts/ends and K as attributes; the converters turn those
into Constant inputs, the form of the latest opset that the tensor ops take.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, outputs, simple, tensor_value
from kiln.ir import dtype as dt
from kiln.ir.expr import Constant, Expr
from kiln.ir.sizes import check_alloc
from kiln.op.concat_slice import SplitAttrs
from kiln.op.creation import EyeLikeAttrs, RangeAttrs
from kiln.op.gather_scatter import ScatterElementsAttrs

for _onnx, _kiln in [("Flatten", "tensor.flatten"), ("Transpose", "tensor.transpose"),
                     ("Gather", "tensor.gather"), ("GatherElements", "tensor.gather_elements"),
                     ("GatherND", "tensor.gather_nd"), ("ScatterElements", "tensor.scatter_elements"),
                     ("ScatterND", "tensor.scatter_nd"), ("TensorScatter", "tensor.tensor_scatter"),
                     ("Expand", "tensor.expand"), ("CenterCropPad", "tensor.center_crop_pad"),
                     ("DepthToSpace", "tensor.depth_to_space"), ("SpaceToDepth", "tensor.space_to_depth"),
                     ("Shape", "tensor.shape"), ("Size", "tensor.size"),
                     ("ConstantOfShape", "tensor.constant_of_shape"), ("OneHot", "tensor.one_hot"),
                     ("Trilu", "tensor.trilu"), ("Compress", "tensor.compress"), ("NonZero", "tensor.non_zero"),
                     ("ReverseSequence", "tensor.reverse_sequence"), ("Unique", "tensor.unique"),
                     ("Col2Im", "tensor.col2im")]:
    simple(_onnx, _kiln)


def _i64(values) -> Constant:
    return Constant(np.asarray(values, dtype=np.int64))


def _attr_input(node: Node, i: int, attr: str) -> Expr | None:
    """Input i, or the (older-opset) attribute of that name as an int64 Constant input."""
    if attr in node.attrs:
        if node.input(i) is not None:
            raise node.error(f"'{attr}' is given both as attribute and as input")
        return _i64(node.attrs[attr])
    return node.input(i)


def _rest(node: Node, *names: str) -> Node:
    """The node without the named attributes (those that became inputs)."""
    attrs = {k: v for k, v in node.attrs.items() if k not in names}
    return Node(node.proto, node.name, node.inputs, attrs, node.opset, node.ctx)


@converter("Reshape")
def _reshape(node: Node):
    shape = _attr_input(node, 1, "shape")
    if shape is None:
        raise node.error("needs a target shape")
    return call("tensor.reshape", node, [node.inputs[0], shape],
                onnx_attrs_to("tensor.reshape", _rest(node, "shape", "consumed_inputs")))


@converter("Squeeze", "Unsqueeze")
def _squeeze(node: Node):
    op = "tensor.squeeze" if node.op_type == "Squeeze" else "tensor.unsqueeze"
    axes = _attr_input(node, 1, "axes")
    if axes is None and op == "tensor.unsqueeze":
        raise node.error("needs axes")
    return call(op, node, [node.inputs[0], axes])


@converter("Concat")
def _concat(node: Node):
    axis = node.attrs.get("axis", 1 if node.opset < 4 else None)
    if axis is None:
        raise node.error("needs the axis attribute")
    return call("tensor.concat", node, node.inputs, onnx_attrs_to("tensor.concat", node, axis=axis))


@converter("Split")
def _split(node: Node):
    split = _attr_input(node, 1, "split")
    num = node.attrs.get("num_outputs")
    if split is None and num is None:
        num = node.num_outputs  # before opset 18: equal parts, one per output
    attrs = SplitAttrs(axis=node.attrs.get("axis", 0), num_outputs=None if split is not None else num)
    return outputs(call("tensor.split", node, [node.inputs[0], split], attrs), node.num_outputs)


@converter("Slice")
def _slice(node: Node):
    if node.opset < 10:
        if "starts" not in node.attrs or "ends" not in node.attrs:
            raise node.error("needs starts and ends")
        axes = node.attrs.get("axes")
        args = [node.inputs[0], _i64(node.attrs["starts"]), _i64(node.attrs["ends"]),
                None if axes is None else _i64(axes)]
        return call("tensor.slice", node, args)
    return call("tensor.slice", node, node.inputs)


@converter("Scatter")
def _scatter(node: Node):
    """The deprecated Scatter is ScatterElements without reduction."""
    return call("tensor.scatter_elements", node, node.inputs,
                ScatterElementsAttrs(axis=node.attrs.get("axis", 0)))


@converter("Tile")
def _tile(node: Node):
    if node.opset < 6:
        raise node.error("Tile before opset 6 (tiles/axis inputs) is not supported")
    return call("tensor.tile", node, node.inputs)


@converter("Pad")
def _pad(node: Node):
    if node.opset >= 11:
        return call("tensor.pad", node, node.inputs, onnx_attrs_to("tensor.pad", node))
    pads = node.attrs.get("pads", node.attrs.get("paddings"))
    if pads is None:
        raise node.error("needs pads")
    data = node.inputs[0]
    value = Constant(np.asarray(node.attrs.get("value", 0.0), dtype=dt.to_numpy(data.type.dtype)))
    return call("tensor.pad", node, [data, _i64(pads), value],
                onnx_attrs_to("tensor.pad", _rest(node, "pads", "paddings", "value")))


@converter("TopK")
def _top_k(node: Node):
    k = _attr_input(node, 1, "k")
    if k is None:
        raise node.error("needs K")
    e = call("tensor.top_k", node, [node.inputs[0], k], onnx_attrs_to("tensor.top_k", _rest(node, "k")))
    return outputs(e, node.num_outputs)


@converter("Range")
def _range(node: Node):
    stash = dt.from_onnx(node.attrs.get("stash_type", onnx.TensorProto.FLOAT))
    return call("tensor.range", node, node.inputs, RangeAttrs(stash_type=stash))


@converter("EyeLike")
def _eye_like(node: Node):
    code = node.attrs.get("dtype")
    return call("tensor.eye_like", node, node.inputs,
                EyeLikeAttrs(dtype=None if code is None else dt.from_onnx(code), k=node.attrs.get("k", 0)))


@converter("Constant")
def _constant(node: Node):
    if len(node.attrs) != 1:
        raise node.error(f"needs exactly one value attribute, got {sorted(node.attrs)}")
    (name, value), = node.attrs.items()
    if name == "sparse_value":
        proto = next(a for a in node.proto.attribute if a.name == name)
        return Constant(dense(proto.sparse_tensor))
    kinds = {"value": None, "value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
             "value_ints": np.int64, "value_string": object, "value_strings": object}
    if name not in kinds:
        raise node.error(f"unsupported attribute '{name}'")
    return Constant(np.asarray(value, dtype=kinds[name]))


def dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    """A SparseTensorProto as a dense array (indices are flat positions or coordinates)."""
    values, indices = tensor_value(sp.values), tensor_value(sp.indices)
    dims = tuple(sp.dims)
    check_alloc(f"sparse tensor '{sp.values.name}'", dims, values.dtype)
    out = np.zeros(math.prod(dims), values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), dims) if indices.size else indices.reshape(-1)
    out[indices] = values
    return out.reshape(dims)

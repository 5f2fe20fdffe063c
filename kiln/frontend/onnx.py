"""ONNX ModelProto -> IRModule.

Each ONNX op type has a converter (registered per family in `onnx_*.py` beside this file)
that turns one node into IR expressions. Initializers become Constants, graph inputs become
typed Vars (dim_params become SizeVars), subgraphs (If/Loop/Scan bodies) become IR Functions
or branch expressions that capture outer values directly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from kiln.errors import ImportError_, KilnError, ModelLoadError, UnsupportedOpError
from kiln.frontend.weights_by_offset import FileWeights, for_checker, parse_leaving_weights
from kiln.ir import dtype as _dt
from kiln.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, absent
from kiln.ir.module import IRModule
from kiln.ir.types import ANY, OptionalType, SeqType, SizeVar, TensorType, TupleType, Type
from kiln.op.registry import get_op


@dataclass
class Node:
    """What a converter sees of one ONNX node."""

    proto: onnx.NodeProto
    name: str
    inputs: list[Expr | None]  # None: an omitted optional input
    attrs: dict[str, Any]  # python values; graph attributes stay GraphProto
    opset: int  # the opset version in force for the node's domain
    ctx: Context

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def num_outputs(self) -> int:
        return len(self.proto.output)

    def input(self, i: int) -> Expr | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def const_input(self, i: int) -> np.ndarray | None:
        e = self.input(i)
        return e.data if isinstance(e, Constant) else None

    def error(self, msg: str) -> ImportError_:
        return ImportError_(f"node '{self.name}' ({self.op_type}): {msg}")


Converter = Callable[[Node], list[Expr] | Expr]
CONVERTERS: dict[tuple[str, str], Converter] = {}


def converter(*op_types: str, domain: str = "") -> Callable[[Converter], Converter]:
    """Register a converter for ONNX op types of a domain ('' is ai.onnx)."""

    def deco(fn: Converter) -> Converter:
        for t in op_types:
            CONVERTERS[(domain, t)] = fn
        return fn

    return deco


def onnx_attrs_to(op_name: str, node: Node, rename: dict[str, str] | None = None,
                  drop: tuple[str, ...] = (), **override: Any) -> Any:
    """The op's attribute dataclass filled from the node's ONNX attributes (same field names)."""
    op = get_op(op_name)
    if op.attrs_type is None:
        extra = set(node.attrs) - set(drop)
        if extra:
            raise node.error(f"unexpected attribute(s) {', '.join(sorted(extra))}")
        return None
    names = {f.name for f in fields(op.attrs_type)}
    kw: dict[str, Any] = {}
    for k, v in node.attrs.items():
        if k in drop:
            continue
        k = (rename or {}).get(k, k)
        if k not in names:
            raise node.error(f"unsupported attribute '{k}'")
        kw[k] = v
    kw.update(override)
    try:
        return op.attrs_type(**kw)
    except (TypeError, ValueError) as e:
        raise node.error(f"bad attributes: {e}") from None


def call(op_name: str, node: Node, args: list[Expr | None], attrs: Any = None) -> Expr:
    """A Call of a registered op on node inputs; omitted optional inputs become `()`."""
    args = list(args)
    while args and args[-1] is None:
        args.pop()
    return Call(get_op(op_name), tuple(absent() if a is None else a for a in args), attrs, node.name)


def outputs(e: Expr, n: int) -> list[Expr]:
    """Split a multi-output call into one expression per ONNX output."""
    if isinstance(e.type, TupleType):
        return [TupleGetItem(e, i) for i in range(min(n, len(e.type.fields)))]
    return [e]


def simple(op_type: str, op_name: str, domain: str = "", **kw: Any) -> None:
    """Register the generic converter: same inputs, same-named attributes, outputs in order."""

    def conv(node: Node) -> list[Expr]:
        attrs = onnx_attrs_to(op_name, node, **kw)
        return outputs(call(op_name, node, node.inputs, attrs), node.num_outputs)

    CONVERTERS[(domain, op_type)] = conv


# ---------------------------------------------------------------------------------------------
# types, attributes, constants


def type_from_proto(tp: onnx.TypeProto, where: str) -> Type:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        tt = tp.tensor_type
        try:
            dt = _dt.from_onnx(tt.elem_type)
        except ValueError as e:
            raise ModelLoadError(f"{where}: {e}") from None
        if not tt.HasField("shape"):
            return TensorType(None, dt)
        dims: list[int | SizeVar] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise ModelLoadError(f"{where}: dim {len(dims)} is {d.dim_value}; a dim is >= 0")
                dims.append(d.dim_value)
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(SizeVar(d.dim_param))
            else:
                dims.append(ANY)
        return TensorType(tuple(dims), dt)
    if kind == "sequence_type":
        return SeqType(type_from_proto(tp.sequence_type.elem_type, where))
    if kind == "optional_type":
        return OptionalType(type_from_proto(tp.optional_type.elem_type, where))
    raise ModelLoadError(f"{where}: unsupported value type '{kind}'")


def attr_value(a: onnx.AttributeProto) -> Any:
    T = onnx.AttributeProto
    if a.type == T.INT:
        return int(a.i)
    if a.type == T.FLOAT:
        return float(a.f)
    if a.type == T.STRING:
        return a.s.decode("utf-8", errors="replace")
    if a.type == T.INTS:
        return tuple(int(x) for x in a.ints)
    if a.type == T.FLOATS:
        return tuple(float(x) for x in a.floats)
    if a.type == T.STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in a.strings)
    if a.type == T.TENSOR:
        return tensor_value(a.t)
    if a.type == T.TENSORS:
        return tuple(tensor_value(t) for t in a.tensors)
    if a.type == T.GRAPH:
        return a.g
    if a.type == T.GRAPHS:
        return tuple(a.graphs)
    if a.type == T.SPARSE_TENSOR:
        return a.sparse_tensor  # converters that accept it (Constant) densify it
    if a.type == T.TYPE_PROTO:
        return a.tp
    raise ValueError(f"unsupported attribute type {a.type}")


def tensor_value(t: onnx.TensorProto) -> np.ndarray:
    try:
        arr = numpy_helper.to_array(t)
    except (ValueError, KeyError, TypeError) as e:  # dims that disagree with the data, an unknown data_type
        raise ModelLoadError(f"tensor '{t.name}' (dims {list(t.dims)}, data_type {t.data_type}) cannot be read: "
                             f"{type(e).__name__}: {e}") from None
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    if t.data_type == onnx.TensorProto.STRING:
        arr = np.vectorize(lambda s: s.decode("utf-8") if isinstance(s, bytes) else s,
                           otypes=[object])(arr) if arr.size else arr.astype(object)
    return np.asarray(arr)


# ---------------------------------------------------------------------------------------------
# graphs


class Context:
    """Conversion state: opsets, model-local functions and a stack of name scopes."""

    def __init__(self, model: onnx.ModelProto, file_weights: FileWeights | None = None):
        self.file_weights = file_weights  # the main graph's initializers left in the file (weights_by_offset)
        self.opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
        self.scopes: list[dict[str, Expr]] = []
        self.model = model
        self.functions = {(f.domain, f.name): f for f in model.functions}

    def lookup(self, name: str, node_name: str) -> Expr:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise ImportError_(f"node '{node_name}': input '{name}' is not produced by any node, "
                           f"initializer or graph input")

    def convert_nodes(self, graph: onnx.GraphProto) -> None:
        scope = self.scopes[-1]
        for t in graph.initializer:
            scope[t.name] = Constant(self.initializer_value(t))
        for i, n in enumerate(graph.node):
            name = n.name or f"{n.op_type}_{i}" + (f"({n.output[0]})" if n.output else "")
            ins = [None if not x else self.lookup(x, name) for x in n.input]
            dom = n.domain if n.domain != "ai.onnx" else ""
            node = Node(n, name, ins, {a.name: attr_value(a) for a in n.attribute}, self.opsets.get(dom, 1), self)
            try:
                if (n.domain, n.op_type) in self.functions:
                    res = self.inline_function(self.functions[(n.domain, n.op_type)], node)
                else:
                    res = CONVERTERS[(dom, n.op_type)](node)
            except UnsupportedOpError:
                raise
            except KilnError as e:
                if name in str(e):
                    raise
                raise type(e)(f"node '{name}' ({n.op_type}): {e}") from None
            res = [res] if isinstance(res, Expr) else list(res)
            for out_name, e in zip(n.output, res):
                if out_name:
                    scope[out_name] = e
            missing = [o for o in n.output[len(res):] if o]
            if missing:
                raise ImportError_(f"node '{name}' ({n.op_type}): output(s) {', '.join(missing)} "
                                   f"are not produced by Kiln's converter")

    def initializer_value(self, t: onnx.TensorProto) -> np.ndarray:
        """An initializer's array: read from the file when the main graph's proto left its bytes there."""
        if self.file_weights is not None and len(self.scopes) == 1 and t.name in self.file_weights.spans:
            return self.file_weights.read(t)
        return tensor_value(t)

    def inline_function(self, fn: onnx.FunctionProto, node: Node) -> list[Expr]:
        """Expand a call of a model-local function: its body, with attribute references resolved."""
        given = {a.name: a for a in node.proto.attribute}
        defaults = {a.name: a for a in fn.attribute_proto}
        body = onnx.GraphProto()
        for inner in fn.node:
            n = body.node.add()
            n.CopyFrom(inner)
            del n.attribute[:]
            for a in inner.attribute:
                if a.ref_attr_name:
                    src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if src is None:
                        continue
                    a2 = n.attribute.add()
                    a2.CopyFrom(src)
                    a2.name = a.name
                else:
                    n.attribute.add().CopyFrom(a)
        scope = {formal: actual for formal, actual in zip(fn.input, node.inputs) if actual is not None}
        saved = self.opsets
        self.opsets = {**saved, **{o.domain if o.domain != "ai.onnx" else "": o.version for o in fn.opset_import}}
        self.scopes.append(scope)
        try:
            self.convert_nodes(body)
            return [scope[o] if o in scope else self.lookup(o, node.name) for o in fn.output]
        finally:
            self.scopes.pop()
            self.opsets = saved

    def graph_outputs(self, graph: onnx.GraphProto) -> list[Expr]:
        return [self.lookup(o.name, f"graph output {o.name}") for o in graph.output]

    def subgraph_function(self, graph: onnx.GraphProto, param_types: list[Type] | None = None) -> Function:
        """A subgraph as a Function of its declared inputs, capturing outer values directly.

        `param_types` overrides the declared input types (for bodies that leave them out)."""
        params = []
        for i, vi in enumerate(graph.input):
            t = param_types[i] if param_types is not None else type_from_proto(vi.type, vi.name)
            params.append(Var(vi.name, t))
        self.scopes.append({p.name: p for p in params})
        try:
            self.convert_nodes(graph)
            outs = self.graph_outputs(graph)
        finally:
            self.scopes.pop()
        return Function(tuple(params), Tuple(tuple(outs)))

    def subgraph_outputs(self, graph: onnx.GraphProto) -> list[Expr]:
        """A subgraph with no inputs (an If branch): its outputs as expressions in the outer scope."""
        self.scopes.append({})
        try:
            self.convert_nodes(graph)
            return self.graph_outputs(graph)
        finally:
            self.scopes.pop()


def _unsupported(model: onnx.ModelProto, opsets: dict[str, int]) -> list[tuple[str, str, int, str]]:
    out: list[tuple[str, str, int, str]] = []
    local = {(f.domain, f.name) for f in model.functions}

    def walk(g: onnx.GraphProto | onnx.FunctionProto) -> None:
        for i, n in enumerate(g.node):
            dom = n.domain if n.domain != "ai.onnx" else ""
            if (dom, n.op_type) not in CONVERTERS and (n.domain, n.op_type) not in local:
                out.append((n.op_type, dom, opsets.get(dom, 0), n.name or f"{n.op_type}_{i}"))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)

    walk(model.graph)
    for f in model.functions:
        walk(f)
    return out


def load_model(path_or_model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """Read and check a model; every failure is a ModelLoadError naming the file."""
    return _load(path_or_model, leave_weights=False)[0]


def _load(path_or_model: str | os.PathLike | bytes | onnx.ModelProto,
          leave_weights: bool) -> tuple[onnx.ModelProto, FileWeights | None]:
    """load_model; with `leave_weights`, a file's main-graph weights stay in the file where its bytes walk as
    protobuf (kiln.frontend.weights_by_offset), so the proto and the importer's arrays never both hold them."""
    # what the checker reads: a path or bytes it parses in C++; a ModelProto it serializes first (resnet50's
    # 100 MB: 150 ms, twice the checking itself), so a model read from a file is checked from the file
    if isinstance(path_or_model, onnx.ModelProto):
        _nonempty(path_or_model, "model")
        _check(path_or_model, "model")
        return path_or_model, None
    if isinstance(path_or_model, bytes):
        where = "model bytes"
    else:
        where = os.fspath(path_or_model)
        if not os.path.exists(where):
            raise ModelLoadError(f"{where}: no such file")
        if os.path.isdir(where):
            raise ModelLoadError(f"{where}: is a directory, expected an .onnx file")
    source = path_or_model if isinstance(path_or_model, bytes) else where
    left = parse_leaving_weights(where) if leave_weights and not isinstance(source, bytes) else None
    if left is not None:  # checked as a proto: without its weights, the checker's copy of it is small
        _nonempty(left[0], where)
        _check(for_checker(*left), where)
        return left
    # NOTE: checked before it is parsed here, so the checker's parsed copy of the weights and this process's
    # never coexist: a file's peak while loading is two copies of its weights, not three (MiniLM: 318 -> 237 MB)
    try:
        _check(source, where)
    except ModelLoadError:
        _nonempty(_parse(source, where), where)  # a file that is not ONNX at all says so first
        raise
    model = _parse(source, where)
    _nonempty(model, where)
    return model, None


def _parse(source: str | bytes, where: str) -> onnx.ModelProto:
    try:
        return onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    except Exception as e:
        if isinstance(source, bytes):
            raise ModelLoadError(f"{where}: not a readable ONNX model ({type(e).__name__}: {e})") from None
        raise ModelLoadError(f"{where}: not a readable ONNX model; the file may be truncated or "
                             f"not ONNX ({type(e).__name__}: {str(e)[:200]})") from None


def _nonempty(model: onnx.ModelProto, where: str) -> None:
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{where}: not an ONNX model (empty graph); the file may be truncated")


def _check(model: onnx.ModelProto | str | bytes, where: str) -> None:
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelLoadError(f"{where}: the ONNX checker rejects the model: {str(e).strip()[:1000]}") from None


def from_onnx(path_or_model: str | os.PathLike | bytes | onnx.ModelProto) -> IRModule:
    """Import an ONNX model (path, bytes or ModelProto) as an IRModule; weights become Constants."""
    import kiln.frontend.onnx_ops  # noqa: F401  (registers every converter)

    model, file_weights = _load(path_or_model, leave_weights=True)
    ctx = Context(model, file_weights)
    bad = _unsupported(model, ctx.opsets)
    if bad:
        raise UnsupportedOpError(bad)
    g = model.graph
    inits = {t.name for t in g.initializer}
    params = [Var(vi.name, type_from_proto(vi.type, f"graph input '{vi.name}'"))
              for vi in g.input if vi.name not in inits]
    ctx.scopes.append({p.name: p for p in params})
    ctx.convert_nodes(g)
    outs = ctx.graph_outputs(g)
    main = Function(tuple(params), Tuple(tuple(outs)))
    return IRModule({"main": main}, tuple(o.name for o in g.output),
                    {"producer": model.producer_name, "opsets": dict(ctx.opsets)})

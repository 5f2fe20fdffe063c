"""Draw a module's main function as SVG (or a self-contained HTML page): one box per operator
call, fused groups (Primitive functions) as boxes that list the operators they contain, tensor
shapes on the edges. No external tools: a layered layout computed here."""

from __future__ import annotations

import html
from dataclasses import dataclass

from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, type_str
from kiln.ir.visitor import post_order, scope_children

BOX_W, BOX_H, GAP_X, GAP_Y, LINE_H, LABEL_W = 250, 34, 40, 60, 14, 240


@dataclass
class _Box:
    key: int
    title: str
    lines: list[str]
    kind: str  # input | op | fused | other | output
    layer: int = 0
    col: int = 0

    @property
    def height(self) -> int:
        return BOX_H + LINE_H * len(self.lines)


def _label(e: Expr) -> tuple[str, list[str], str] | None:
    if isinstance(e, Var):
        return e.name, [type_str(e.type)], "input"
    if isinstance(e, Call) and isinstance(e.op, Op):
        return e.op.name, [], "op"
    if isinstance(e, Call) and isinstance(e.op, Function) and e.op.attr("Primitive"):
        ops = [x.op.name for x in post_order(e.op.body) if isinstance(x, Call) and isinstance(x.op, Op)]
        title = f"fused ({len(ops)} op{'s' if len(ops) != 1 else ''})"
        return title, ops[:12] + (["..."] if len(ops) > 12 else []), "fused"
    if isinstance(e, Call):
        name = e.op.name if isinstance(e.op, GlobalVar) else "call"
        return f"call {name}", [], "other"
    if isinstance(e, If):
        return "if", [], "other"
    if isinstance(e, (Tuple, TupleGetItem)):
        return None  # drawn as plain edges
    return None


def _edge_label(e: Expr) -> str:
    t = e.type
    if isinstance(t, TensorType):
        return type_str(t).removeprefix("Tensor[").removesuffix("]")
    return type_str(t)


def layout(mod: IRModule) -> tuple[list[_Box], list[tuple[int, int, str]]]:
    """Boxes with layer/column, and edges (from key, to key, label)."""
    main = mod.main
    boxes: dict[int, _Box] = {}
    sources: dict[int, list[tuple[int, str]]] = {}  # id(expr) -> drawn producers reaching it
    edges: list[tuple[int, int, str]] = []
    for e in _scope(main):
        lab = _label(e)
        if isinstance(e, Constant) or isinstance(e, Function):
            sources[id(e)] = []
            continue
        if lab is None:
            if isinstance(e, TupleGetItem):  # one field of a multi-output call: label it with its own type
                sources[id(e)] = [(s, _edge_label(e)) for s, _ in sources.get(id(e.tuple_value), [])]
            else:
                kids = e.fields if isinstance(e, Tuple) else ()
                sources[id(e)] = [s for k in kids for s in sources.get(id(k), [])]
            continue
        title, lines, kind = lab
        b = _Box(id(e), title, lines, kind)
        boxes[id(e)] = b
        args = e.args if isinstance(e, Call) else (e.cond,) if isinstance(e, If) else ()
        for a in args:
            for src, label in sources.get(id(a), []):
                edges.append((src, b.key, label))
        sources[id(e)] = [(b.key, _edge_label(e))]
    out = _Box(-1, "outputs", list(mod.output_names)[:8], "output")
    boxes[-1] = out
    for src, label in sources.get(id(main.body), []):
        edges.append((src, -1, label))
    _assign_layers(boxes, edges)
    return list(boxes.values()), edges


def _scope(fn: Function) -> list[Expr]:
    """Top-level dataflow nodes of `fn` (not inside fused or nested function bodies)."""
    return list(fn.params) + [e for e in post_order(fn.body, scope_children) if not isinstance(e, Var)]


def _assign_layers(boxes: dict[int, _Box], edges: list[tuple[int, int, str]]) -> None:
    preds: dict[int, list[int]] = {k: [] for k in boxes}
    for s, d, _ in edges:
        preds[d].append(s)
    for k, b in boxes.items():  # boxes are in topological order (post-order), outputs last
        b.layer = 1 + max((boxes[p].layer for p in preds[k]), default=-1)
    cols: dict[int, int] = {}
    for b in boxes.values():
        b.col = cols.get(b.layer, 0)
        cols[b.layer] = b.col + 1


COLORS = {"input": "#e8f1fb", "op": "#ffffff", "fused": "#fff4dc", "other": "#f0f0f0", "output": "#e9f7ec"}


def to_svg(mod: IRModule) -> str:
    boxes, edges = layout(mod)
    layer_h: dict[int, int] = {}
    for b in boxes:
        layer_h[b.layer] = max(layer_h.get(b.layer, 0), b.height)
    y_of, y = {}, 20
    for layer in sorted(layer_h):
        y_of[layer] = y
        y += layer_h[layer] + GAP_Y
    pos = {b.key: (20 + b.col * (BOX_W + GAP_X), y_of[b.layer], b) for b in boxes}
    width = 40 + (max((b.col for b in boxes), default=0) + 1) * (BOX_W + GAP_X) + LABEL_W
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
             f'font-family="monospace" font-size="11">',
             '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
             '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for s, d, label in edges:
        x1, y1, bs = pos[s]
        x2, y2, bd = pos[d]
        skip = bd.layer - bs.layer - 1  # an edge that jumps layers bends right, around the boxes between
        x1, y1, x2 = x1 + BOX_W / 2 + (BOX_W / 3 if skip else 0), y1 + bs.height, x2 + BOX_W / 2 + (
            BOX_W / 3 if skip else 0)
        bend = BOX_W / 2 + 30 * skip if skip else 0
        parts.append(f'<path d="M{x1},{y1} C{x1 + bend},{y1 + 60} {x2 + bend},{y2 - 60} {x2},{y2}" stroke="#555" '
                     f'fill="none" marker-end="url(#arr)"/>')
        lx, ly = ((x1 + x2) / 2 + bend * 0.75 + 4, (y1 + y2) / 2) if skip else (x1 + 4, (y1 + y2) / 2)
        parts.append(f'<text x="{lx}" y="{ly}" fill="#336">{html.escape(label)}</text>')
    for x, y0, b in pos.values():
        dash = ' stroke-dasharray="5,3" stroke-width="2"' if b.kind == "fused" else ""
        parts.append(f'<rect x="{x}" y="{y0}" width="{BOX_W}" height="{b.height}" rx="6" '
                     f'fill="{COLORS[b.kind]}" stroke="#333"{dash}/>')
        parts.append(f'<text x="{x + 8}" y="{y0 + 20}" font-weight="bold">{html.escape(b.title)}</text>')
        for i, line in enumerate(b.lines):
            parts.append(f'<text x="{x + 14}" y="{y0 + 20 + LINE_H * (i + 1)}">{html.escape(line)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def to_html(mod: IRModule, title: str = "kiln graph") -> str:
    """A self-contained page (inline SVG, no scripts or external resources)."""
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:16px} .legend span{padding:2px 8px;margin-right:8px;"
            "border:1px solid #333;border-radius:4px}</style></head><body>"
            f"<h2>{html.escape(title)}</h2><p class='legend'><span style='background:{COLORS['input']}'>input"
            f"</span><span style='background:{COLORS['fused']}'>fused group</span><span>operator</span>"
            f"<span style='background:{COLORS['output']}'>outputs</span> edges show tensor shapes</p>"
            f"{to_svg(mod)}</body></html>\n")

"""Text -> IR: a hand-written tokenizer and recursive-descent parser for the printer's form.

Statements are parsed in a loop, so long chains (and long `let` chains) never recurse; only
nested blocks (fn, if, braced let) do. Every error names line, column and what was expected.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

import numpy as np

from kiln.errors import KilnError, ParseError
from kiln.ir import dtype as _dt
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.op_table import lookup_op
from kiln.ir.types import FuncType, OptionalType, SeqType, SizeVar, TensorType, TupleType, Type


class Tok(NamedTuple):
    kind: str  # BIND VAR GLOBAL IDENT INT FLOAT STR PUNCT EOF
    text: str
    pos: int


_STR = r'"(?:[^"\\\n]|\\.)*"'
_TOKEN = re.compile(rf"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<BIND>%\d+)
  | (?P<VAR>%(?:[A-Za-z_][A-Za-z0-9_]*|{_STR}))
  | (?P<GLOBAL>@(?:[A-Za-z_][A-Za-z0-9_]*|{_STR}))
  | (?P<FLOAT>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)|-inf\b)
  | (?P<INT>-?\d+)
  | (?P<IDENT>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<STR>{_STR})
  | (?P<PUNCT>->|[()\[\]{{}},;:=.#*?<>])
""", re.VERBOSE)
_DIGITS = re.compile(r"\d+")


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while pos < len(src):
        if toks and toks[-1].text == "." and src[pos].isdigit():  # `%3.1.0`: indices, not floats
            m = _DIGITS.match(src, pos)
            toks.append(Tok("INT", m.group(), pos))
            pos = m.end()
            continue
        m = _TOKEN.match(src, pos)
        if m is None:
            raise _error(src, pos, f"unexpected character {src[pos]!r}")
        if m.lastgroup != "ws":
            toks.append(Tok(m.lastgroup, m.group(), pos))
        pos = m.end()
    toks.append(Tok("EOF", "", len(src)))
    return toks


def _error(src: str, pos: int, msg: str) -> ParseError:
    line = src.count("\n", 0, pos) + 1
    col = pos - (src.rfind("\n", 0, pos) + 1) + 1
    return ParseError(f"line {line}, column {col}: {msg}")


_NAMED = {"inf": float("inf"), "nan": float("nan"), "true": True, "false": False}


def _name(tok: Tok) -> str:
    body = tok.text[1:]
    return json.loads(body) if body.startswith('"') else body


def parse(src: str, params: list | None = None) -> IRModule:
    """Parse a module printed by `kiln.ir.text` (`params`: the arrays its `meta[i]` refer to)."""
    return _Parser(src, params).module()


def parse_expr(src: str, params: list | None = None, free_vars: tuple[Var, ...] = ()) -> Expr:
    """Parse one expression (a block of statements and a result); `free_vars` resolve by name."""
    p = _Parser(src, params)
    p.scopes.append({("v", v.name): v for v in free_vars})
    e = p.block_body()
    p.expect("EOF")
    return e


class _Parser:
    def __init__(self, src: str, params: list | None):
        self.src, self.params = src, params
        self.toks = tokenize(src)
        self.i = 0
        self.scopes: list[dict[tuple[str, str], Expr]] = []
        self.globals: dict[str, GlobalVar] = {}
        self.meta: dict[int, Constant] = {}

    # -- tokens -------------------------------------------------------------------------------

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def error(self, msg: str, tok: Tok | None = None) -> ParseError:
        return _error(self.src, (tok or self.tok).pos, msg)

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind in ("PUNCT", "IDENT")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, what: str) -> Tok:
        """Consume a token of kind `what` (upper case) or with text `what`."""
        t = self.tok
        if (t.kind == what) if what.isupper() else (t.text == what and t.kind in ("PUNCT", "IDENT")):
            self.i += 1
            return t
        found = repr(t.text) if t.kind != "EOF" else "end of input"
        raise self.error(f"expected {what if what.isupper() else repr(what)}, found {found}")

    def comma_list(self, close: str, item) -> list:
        out = []
        while not self.accept(close):
            out.append(item())
            if not self.at(close):
                self.expect(",")
        return out

    # -- module -------------------------------------------------------------------------------

    def module(self) -> IRModule:
        output_names: tuple[str, ...] = ()
        if self.accept("#"):
            self.expect("[")
            for key, val in self.comma_list("]", self.attr_item):
                if key != "output_names":
                    raise self.error(f"unknown module attribute {key!r}")
                output_names = tuple(val)
        heads = []
        while self.tok.kind != "EOF":
            self.expect("def")
            name = _name(self.expect("GLOBAL"))
            params, attrs, ret = self.fn_head()
            if ret is not None:
                self.globals[name] = GlobalVar(name, FuncType(tuple(p.type for p in params), ret))
            heads.append((name, params, attrs, self.i))
            self.skip_braces()
        functions: dict[str, Function] = {}
        for name, params, attrs, start in heads:
            self.i = start
            fn = self.fn_body(params, attrs)
            functions[name] = fn
            self.globals.setdefault(name, GlobalVar(name, fn.type))
        self.expect("EOF")
        if "main" not in functions:
            raise ParseError("the module has no `def @main`")
        return IRModule(functions, output_names)

    def skip_braces(self) -> None:
        self.expect("{")
        depth = 1
        while depth:
            t = self.tok
            if t.kind == "EOF":
                raise self.error("expected '}', found end of input")
            self.i += 1
            if t.kind == "PUNCT":
                depth += (t.text == "{") - (t.text == "}")

    def fn_head(self) -> tuple[list[Var], dict[str, Any], Type | None]:
        """`(%p: T, ..., Key=value, ...) [-> T]`; the params are in scope of the body."""
        self.expect("(")
        params, attrs = [], {}
        for item in self.comma_list(")", self.param_or_attr):
            if isinstance(item, Var):
                params.append(item)
            else:
                attrs[item[0]] = item[1]
        return params, attrs, self.type() if self.accept("->") else None

    def param_or_attr(self) -> Var | tuple[str, Any]:
        if self.tok.kind in ("IDENT", "STR"):
            return self.attr_item()
        t = self.expect("VAR")
        self.expect(":")
        return Var(_name(t), self.type())

    def fn_body(self, params: list[Var], attrs: dict[str, Any]) -> Function:
        self.expect("{")
        self.scopes.append({("v", p.name): p for p in params})
        body = self.block_body()
        self.scopes.pop()
        self.expect("}")
        return Function(tuple(params), body, attrs)

    # -- statements ---------------------------------------------------------------------------

    def block(self) -> Expr:
        self.expect("{")
        self.scopes.append({})
        e = self.block_body()
        self.scopes.pop()
        self.expect("}")
        return e

    def block_body(self) -> Expr:
        """`stmt*` then the result; `let`s nest over everything after them."""
        lets: list[tuple[Var, Expr]] = []
        scope = self.scopes[-1]
        while True:
            t = self.tok
            if t.kind == "BIND" and self.toks[self.i + 1].text == "=":
                self.i += 2
                scope[("b", t.text[1:])] = self.expr()
                self.expect(";")
            elif self.accept("let"):
                v = self.expect("VAR")
                self.expect(":")
                var = Var(_name(v), self.type())
                self.expect("=")
                lets.append((var, self.expr()))
                self.expect(";")
                scope[("v", var.name)] = var
            else:
                break
        body = self.expr()
        for var, value in reversed(lets):
            body = Let(var, value, body)
        return body

    # -- expressions --------------------------------------------------------------------------

    def expr(self) -> Expr:
        start = self.tok
        try:
            e = self.primary()
            while True:
                if self.accept("."):
                    e = TupleGetItem(e, int(self.expect("INT").text))
                elif self.accept("("):  # a function value applied to arguments
                    e = Call(e, tuple(self.comma_list(")", self.expr)))
                else:
                    return e
        except ParseError:
            raise
        except KilnError as exc:
            raise self.error(f"{exc}", start) from None

    def lookup(self, key: tuple[str, str], tok: Tok) -> Expr:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        raise self.error(f"{tok.text} is not defined here", tok)

    def primary(self) -> Expr:
        t = self.tok
        if t.kind == "BIND":
            self.i += 1
            return self.lookup(("b", t.text[1:]), t)
        if t.kind == "VAR":
            self.i += 1
            return self.lookup(("v", _name(t)), t)
        if t.kind == "GLOBAL":
            self.i += 1
            if _name(t) not in self.globals:
                raise self.error(f"unknown global function {t.text} (or its return type is not declared)", t)
            return self.globals[_name(t)]
        if self.at("("):
            self.i += 1
            return Tuple(tuple(self.comma_list(")", self.expr)))
        if self.at("{"):
            return self.block()
        if self.accept("if"):
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            then = self.block()
            self.expect("else")
            return If(cond, then, self.block())
        if self.accept("fn"):
            params, attrs, _ = self.fn_head()
            return self.fn_body(params, attrs)
        if t.kind == "IDENT" and self.toks[self.i + 1].text == "(" and "." in t.text:
            return self.op_call()
        if self.accept("meta"):
            return self.meta_ref()
        if t.kind in ("INT", "FLOAT", "IDENT") or self.at("["):
            v = self.value()
            if isinstance(v, (np.ndarray, np.generic)):
                return Constant(np.asarray(v))
        raise self.error("expected an expression", t)

    def op_call(self) -> Expr:
        t = self.expect("IDENT")
        try:
            op = lookup_op(t.text)
        except KeyError as e:
            raise self.error(e.args[0], t) from None
        self.expect("(")
        args, kw = [], {}
        for item in self.comma_list(")", self.arg_or_attr):
            if isinstance(item, Expr):
                args.append(item)
            else:
                kw[item[0]] = item[1]
        if kw and op.attrs_type is None:
            raise self.error(f"{op.name} takes no attributes", t)
        try:
            attrs = op.attrs_type(**kw) if op.attrs_type is not None else None
        except (TypeError, ValueError) as exc:
            raise self.error(f"bad attributes for {op.name}: {exc}", t) from None
        return Call(op, tuple(args), attrs)

    def arg_or_attr(self) -> Expr | tuple[str, Any]:
        if self.tok.kind == "IDENT" and self.toks[self.i + 1].text == "=":
            return self.attr_item()
        return self.expr()

    def attr_item(self) -> tuple[str, Any]:
        t = self.tok
        if t.kind not in ("IDENT", "STR"):
            raise self.error("expected an attribute name")
        self.i += 1
        self.expect("=")
        return (json.loads(t.text) if t.kind == "STR" else t.text), self.value()

    # -- values and types ---------------------------------------------------------------------

    def value(self) -> Any:
        """An attribute value (see printer.value): numpy scalars print as `1.5:float32`."""
        t = self.tok
        if t.kind == "STR":
            self.i += 1
            return json.loads(t.text)
        if t.kind in ("INT", "FLOAT") or t.text in ("inf", "nan", "true", "false"):
            self.i += 1
            v = _NAMED.get(t.text) if t.kind == "IDENT" else (int(t.text) if t.kind == "INT" else float(t.text))
            return self.array([v], ())[()] if self.accept(":") else v
        if self.accept("None"):
            return None
        if self.accept("("):
            return tuple(self.comma_list(")", self.value))
        if self.accept("["):
            vals = self.comma_list("]", self.value)
            self.expect(":")
            return self.array(vals, None)
        if self.accept("meta"):
            return self.meta_ref().data
        if self.accept("Type"):
            self.expect("(")
            ty = self.type()
            self.expect(")")
            return ty
        raise self.error("expected a value", t)

    def array(self, vals: list, shape: tuple[int, ...] | None) -> np.ndarray:
        """`vals` typed by the `dtype` that follows, then shaped by `(dims)` when `shape` is None."""
        t = self.expect("IDENT")
        if t.text not in _dt.NAME_TO_NUMPY or t.text == "string":
            raise self.error(f"unknown dtype {t.text!r}", t)
        if shape is None:
            self.expect("(")
            shape = tuple(self.comma_list(")", lambda: int(self.expect("INT").text)))
        np_dt = _dt.to_numpy(t.text)
        try:
            if _dt.is_float(t.text):
                return np.array(vals, dtype=np.float64).astype(np_dt).reshape(shape)
            return np.array(vals, dtype=np_dt).reshape(shape)
        except (TypeError, ValueError, OverflowError) as exc:
            raise self.error(f"bad {t.text} literal: {exc}", t) from None

    def meta_ref(self) -> Constant:
        self.expect("[")
        t = self.expect("INT")
        self.expect("]")
        k = int(t.text)
        if self.params is None or not 0 <= k < len(self.params):
            raise self.error(f"meta[{k}] is not in the params table "
                             f"({'none given' if self.params is None else len(self.params)})", t)
        if k not in self.meta:
            self.meta[k] = Constant(self.params[k])
        return self.meta[k]

    def type(self) -> Type:
        """A type as `kiln.ir.types.type_str` writes it."""
        t = self.tok
        if self.accept("Tensor"):
            self.expect("[")
            shape = None if self.accept("*") else self.dims()
            self.expect(",")
            dt = self.expect("IDENT")
            self.expect("]")
            if dt.text not in _dt.NAME_TO_NUMPY:
                raise self.error(f"unknown dtype {dt.text!r}", dt)
            return TensorType(shape, dt.text)
        if self.accept("("):
            return TupleType(tuple(self.comma_list(")", self.type)))
        if self.at("Seq") or self.at("Optional"):
            self.i += 1
            self.expect("[")
            elem = self.type()
            self.expect("]")
            return SeqType(elem) if t.text == "Seq" else OptionalType(elem)
        if self.accept("fn"):
            self.expect("(")
            params = tuple(self.comma_list(")", self.type))
            self.expect("->")
            return FuncType(params, self.type())
        raise self.error("expected a type", t)

    def dims(self) -> tuple[int | SizeVar, ...]:
        """`(3, N, ?)`: a symbolic dim is the raw text up to the next `,` or `)`."""
        self.expect("(")
        out: list[int | SizeVar] = []
        while not self.accept(")"):
            first = self.tok
            if first.kind == "INT" and self.toks[self.i + 1].text in (",", ")"):
                out.append(int(first.text))
                self.i += 1
            else:
                while not (self.at(",") or self.at(")")):
                    if self.tok.kind == "EOF":
                        raise self.error("expected ')' after the dims")
                    self.i += 1
                name = self.src[first.pos:self.tok.pos].strip()
                if not name:
                    raise self.error("expected a dim", first)
                out.append(SizeVar(name))
            if not self.at(")"):
                self.expect(",")
        return tuple(out)

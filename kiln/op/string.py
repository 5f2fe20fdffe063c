"""String operators. Strings are numpy object arrays of `str` (dtype name `string`)."""

from __future__ import annotations

import itertools
import operator
import re
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, TensorType, TupleType
from kiln.op.registry import BROADCAST, ELEMWISE, OPAQUE, define_op
from kiln.op.typerel import broadcast_rel, check_dtype, tensor


def strings(values) -> np.ndarray:
    """An object array of str from any nested list/array of str (0-d results stay arrays)."""
    out = np.empty(np.shape(values), dtype=object)
    out[...] = values
    return out


def _string_rel(attrs, types, values) -> TensorType:
    x = tensor(types[0])
    check_dtype(x, ("string",))
    return x


# ---------------------------------------------------------------------------------------------
# elementwise


def _concat_rel(attrs, types, values) -> TensorType:
    out = broadcast_rel(attrs, types, values)
    check_dtype(out, ("string",))
    return out


_add = np.frompyfunc(operator.add, 2, 1)

string_concat = define_op("string.string_concat", host_only=True, pattern=BROADCAST, inputs=2, infer=_concat_rel,
                          ref=lambda a, x, y: strings(_add(x, y)),
                          doc="Elementwise x + y of strings, with numpy broadcasting.")


@dataclass(frozen=True)
class RegexFullMatchAttrs:
    pattern: str | None = None


def _regex_rel(attrs: RegexFullMatchAttrs, types, values) -> TensorType:
    if attrs.pattern is None:
        raise TypeInferenceError("the `pattern` attribute is required")
    try:
        re.compile(attrs.pattern)
    except re.error as e:
        raise TypeInferenceError(f"bad regular expression {attrs.pattern!r}: {e}") from None
    return TensorType(_string_rel(attrs, types, values).shape, "bool")


def _regex_ref(attrs: RegexFullMatchAttrs, x):
    """NOTE: ONNX names RE2 syntax; Python's `re` agrees on the common subset."""
    rx = re.compile(attrs.pattern)
    return np.vectorize(lambda s: rx.fullmatch(s) is not None, otypes=[np.bool_])(x).reshape(x.shape)


regex_full_match = define_op("string.regex_full_match", host_only=True, pattern=ELEMWISE, attrs=RegexFullMatchAttrs,
                             infer=_regex_rel, ref=_regex_ref,
                             doc="Whether each string matches `pattern` as a whole.")


# ---------------------------------------------------------------------------------------------
# StringSplit


@dataclass(frozen=True)
class StringSplitAttrs:
    delimiter: str | None = None
    maxsplit: int | None = None


def _split_rel(attrs: StringSplitAttrs, types, values) -> TupleType:
    x = _string_rel(attrs, types, values)
    parts = None if x.shape is None else x.shape + (ANY,)
    return TupleType((TensorType(parts, "string"), TensorType(x.shape, "int64")))


def _split_ref(attrs: StringSplitAttrs, x):
    """Split every string; rows are padded with "" to the longest split."""
    sep = attrs.delimiter or None  # None: runs of whitespace, both ends trimmed
    limit = -1 if attrs.maxsplit is None else attrs.maxsplit
    parts = [(s if sep else s.strip()).split(sep, limit) for s in x.reshape(-1).tolist()]
    width = max((len(p) for p in parts), default=0)
    y = strings([p + [""] * (width - len(p)) for p in parts]) if parts else np.empty((0, 0), object)
    counts = np.array([len(p) for p in parts], np.int64)
    return y.reshape(x.shape + (width,)), counts.reshape(x.shape)


string_split = define_op("string.string_split", pattern=OPAQUE, attrs=StringSplitAttrs, infer=_split_rel,
                         host_only=True, ref=_split_ref,
                         doc="(substrings padded with '', number of substrings) of each string.")


# ---------------------------------------------------------------------------------------------
# StringNormalizer


@dataclass(frozen=True)
class StringNormalizerAttrs:
    case_change_action: str = "NONE"
    is_case_sensitive: int = 0
    locale: str | None = None
    stopwords: tuple[str, ...] | None = None


def _normalizer_rel(attrs: StringNormalizerAttrs, types, values) -> TensorType:
    x = _string_rel(attrs, types, values)
    if attrs.case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise TypeInferenceError(f"case_change_action must be NONE, LOWER or UPPER, got {attrs.case_change_action!r}")
    if x.shape is not None and not (len(x.shape) == 1 or (len(x.shape) == 2 and x.shape[0] == 1)):
        raise TypeInferenceError(f"input must have shape [C] or [1, C], got {x.shape}")
    if not attrs.stopwords or x.shape is None:
        return x
    return TensorType(x.shape[:-1] + (ANY,), "string")


def _normalizer_ref(attrs: StringNormalizerAttrs, x):
    """Drop stopwords, then change case; dropping everything leaves one empty string."""
    fold = (lambda s: s) if attrs.is_case_sensitive else str.lower
    stop = {fold(w) for w in attrs.stopwords or ()}
    kept = [s for s in x.reshape(-1).tolist() if fold(s) not in stop] or [""]
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(attrs.case_change_action)
    if change is not None:
        kept = [change(s) for s in kept]
    return strings(kept).reshape(x.shape[:-1] + (len(kept),))


string_normalizer = define_op("string.string_normalizer", host_only=True, pattern=OPAQUE, attrs=StringNormalizerAttrs,
                              infer=_normalizer_rel, ref=_normalizer_ref,
                              doc="Remove stopwords and change case of a [C] or [1, C] string tensor.")


# ---------------------------------------------------------------------------------------------
# TfIdfVectorizer


@dataclass(frozen=True)
class TfIdfVectorizerAttrs:
    max_gram_length: int
    max_skip_count: int
    min_gram_length: int
    mode: str
    ngram_counts: tuple[int, ...]
    ngram_indexes: tuple[int, ...]
    pool_int64s: tuple[int, ...] | None = None
    pool_strings: tuple[str, ...] | None = None
    weights: tuple[float, ...] | None = None


def _pool(attrs: TfIdfVectorizerAttrs) -> tuple:
    return attrs.pool_strings if attrs.pool_strings is not None else attrs.pool_int64s


def _tfidf_rel(attrs: TfIdfVectorizerAttrs, types, values) -> TensorType:
    x = tensor(types[0])
    if (attrs.pool_strings is None) == (attrs.pool_int64s is None):
        raise TypeInferenceError("exactly one of pool_strings and pool_int64s must be set")
    check_dtype(x, ("string",) if attrs.pool_strings is not None else ("int32", "int64"))
    if attrs.mode not in ("TF", "IDF", "TFIDF"):
        raise TypeInferenceError(f"mode must be TF, IDF or TFIDF, got {attrs.mode!r}")
    if not 1 <= attrs.min_gram_length <= attrs.max_gram_length:
        raise TypeInferenceError(f"bad n-gram lengths {attrs.min_gram_length}..{attrs.max_gram_length}")
    if x.shape is not None and len(x.shape) not in (1, 2):
        raise TypeInferenceError(f"input must have shape [C] or [N, C], got {x.shape}")
    width = max(attrs.ngram_indexes) + 1
    return TensorType(None if x.shape is None else x.shape[:-1] + (width,), "float32")


def ngram_columns(attrs: TfIdfVectorizerAttrs) -> dict[tuple, int]:
    """Every pool n-gram (as a tuple) -> its output column. Pool n-grams are numbered in order,
    the n-grams of size k occupying pool[ngram_counts[k-1]:ngram_counts[k]]."""
    pool = _pool(attrs)
    bounds = list(attrs.ngram_counts) + [len(pool)]
    columns, k = {}, 0
    for size, (lo, hi) in enumerate(itertools.pairwise(bounds), 1):
        for start in range(lo, lo + (hi - lo) // size * size, size):
            columns[tuple(pool[start:start + size])] = attrs.ngram_indexes[k]
            k += 1
    return columns


def _count_row(row: list, columns: dict[tuple, int], attrs: TfIdfVectorizerAttrs, out: np.ndarray) -> None:
    """Count the n-grams of one row: sizes min..max, items `skip + 1` apart for every skip up to
    max_skip_count (1-grams once)."""
    for size in range(attrs.min_gram_length, attrs.max_gram_length + 1):
        for gap in range(1, 2 if size == 1 else attrs.max_skip_count + 2):
            for start in range(len(row) - (size - 1) * gap):
                col = columns.get(tuple(row[start:start + (size - 1) * gap + 1:gap]))
                if col is not None:
                    out[col] += 1


def _tfidf_ref(attrs: TfIdfVectorizerAttrs, x):
    columns = ngram_columns(attrs)
    width = max(attrs.ngram_indexes) + 1
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    counts = np.zeros((rows.shape[0], width), np.float32)
    for row, out in zip(rows.tolist(), counts):
        _count_row(row, columns, attrs, out)
    weight = np.ones(width, np.float32)
    if attrs.weights:
        weight[list(attrs.ngram_indexes)] = attrs.weights
    if attrs.mode == "IDF":
        counts = (counts > 0).astype(np.float32) * weight
    elif attrs.mode == "TFIDF":
        counts = counts * weight
    return counts.reshape(x.shape[:-1] + (width,))


tf_idf_vectorizer = define_op("string.tf_idf_vectorizer", pattern=OPAQUE, attrs=TfIdfVectorizerAttrs,
                              infer=_tfidf_rel, ref=_tfidf_ref,
                              doc="Counts (TF), weighted presence (IDF) or weighted counts (TFIDF) of "
                                  "the pool's n-grams, with skips, per row.")

"""ONNX converters for string operators (kiln/op/string.py)."""

from __future__ import annotations

from kiln.frontend.onnx import simple

simple("StringConcat", "string.string_concat")
simple("RegexFullMatch", "string.regex_full_match")
simple("StringSplit", "string.string_split")
simple("StringNormalizer", "string.string_normalizer")
simple("TfIdfVectorizer", "string.tf_idf_vectorizer")

"""C types of tir dtypes, and the module-wide declarations expressions need (vector typedefs, externs).

Values are computed in VALUE_CTYPE and stored in STORAGE_CTYPE: float16/bfloat16 live in memory as
uint16_t and are computed as float (rounded at casts and stores), float8/float4 likewise as uint8_t
(float4_e2m1fn one value per byte, as numpy lays it out), bool is a 0/1 uint8_t. int4/uint4/int2/uint2
are one value per byte too, in its low bits (ml_dtypes' layout: the high bits are zero when written and
ignored when read); their values are int8_t/uint8_t, wrapped back into range after every operation.
"""

from __future__ import annotations

from kiln.errors import CodegenError  # noqa: F401  (re-exported)
from kiln.tir.expr import elem_of, lanes_of

# a kernel's error flag: allocation failures, runtime-library errors and bad gathered indices set it
# (atomically, from any thread); the kernel returns it
ERROR_FLAG = "_kerr"
# the placeholder of a function's typed-body symbol in its rendering (kiln.codegen.c_source); code placed
# beside the body (lifted tasks) names itself after it
BODY_SYMBOL = "@KILN_BODY@"

VALUE_CTYPE = {
    "bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "float16": "float", "bfloat16": "float", "float32": "float", "float64": "double",
}
# float8/float4 dtype -> the suffix of its kiln_runtime.h helpers (kiln_f32_to_f8e5m2, kiln_round_f8e5m2, ...)
SMALL_FLOAT_SUFFIX = {"float8_e4m3fn": "f8e4m3fn", "float8_e4m3fnuz": "f8e4m3fnuz", "float8_e5m2": "f8e5m2",
                      "float8_e5m2fnuz": "f8e5m2fnuz", "float8_e8m0fnu": "f8e8m0fnu", "float4_e2m1fn": "f4e2m1fn"}
VALUE_CTYPE.update(dict.fromkeys(SMALL_FLOAT_SUFFIX, "float"))
# sub-byte int dtype -> the kiln_runtime.h helper that wraps an int64_t into its range (two's complement)
SUB_BYTE_WRAP = {"int4": "kiln_wrap_i4", "uint4": "kiln_wrap_u4", "int2": "kiln_wrap_i2", "uint2": "kiln_wrap_u2"}
VALUE_CTYPE.update({"int4": "int8_t", "uint4": "uint8_t", "int2": "int8_t", "uint2": "uint8_t"})
STORAGE_CTYPE = {**VALUE_CTYPE, "float16": "uint16_t", "bfloat16": "uint16_t",
                 **dict.fromkeys(SMALL_FLOAT_SUFFIX, "uint8_t"), **dict.fromkeys(SUB_BYTE_WRAP, "uint8_t")}
SIZEOF = {"uint8_t": 1, "int8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4, "uint32_t": 4, "float": 4,
          "int64_t": 8, "uint64_t": 8, "double": 8}
# the suffix of runtime helpers (kiln_min_i32, kiln_floordiv_i64, ...) for a value type
HELPER_SUFFIX = {"uint8_t": "u8", "int8_t": "i8", "int16_t": "i16", "uint16_t": "u16", "int32_t": "i32",
                 "uint32_t": "u32", "int64_t": "i64", "uint64_t": "u64", "float": "f32", "double": "f64"}
# float16/bfloat16/float8/float4 loads and stores convert between storage and value; sub-byte ints
# are read from the byte's low bits (sign-extended) and written as those bits
LOAD_CONVERT = {"float16": "kiln_f16_to_f32", "bfloat16": "kiln_bf16_to_f32",
                **{d: f"kiln_{s}_to_f32" for d, s in SMALL_FLOAT_SUFFIX.items()}, **SUB_BYTE_WRAP}
STORE_CONVERT = {"float16": "kiln_f32_to_f16", "bfloat16": "kiln_f32_to_bf16",
                 **{d: f"kiln_f32_to_{s}" for d, s in SMALL_FLOAT_SUFFIX.items()},
                 "int4": "kiln_wrap_u4", "uint4": "kiln_wrap_u4", "int2": "kiln_wrap_u2", "uint2": "kiln_wrap_u2"}
# the runtime helper that rounds a float to the value a narrow float dtype holds
ROUND_HELPER = {"float16": "kiln_round_f16", "bfloat16": "kiln_round_bf16",
                **{d: f"kiln_round_{s}" for d, s in SMALL_FLOAT_SUFFIX.items()}}
NARROW_INTS = ("int8", "int16", "uint8", "uint16")
UNSIGNED_INTS = ("bool", "uint8", "uint16", "uint32", "uint64", "uint4", "uint2")


def scalar_ctype(dtype: str) -> str:
    elem = elem_of(dtype)
    if elem not in VALUE_CTYPE:
        raise CodegenError(f"the C backend has no type for dtype {dtype!r}")
    return VALUE_CTYPE[elem]


def is_float_value(dtype: str) -> bool:
    return scalar_ctype(dtype) in ("float", "double")


class ModuleDecls:
    """Declarations shared by all functions of one module, emitted once before them."""

    def __init__(self) -> None:
        self.vector_types: dict[str, str] = {}
        self.externs: dict[str, str] = {}

    def ctype(self, dtype: str) -> str:
        """The C value type of a scalar or vector dtype (vectors are GCC vector extensions)."""
        lanes, elem = lanes_of(dtype), scalar_ctype(dtype)
        if lanes == 1:
            return elem
        if lanes & (lanes - 1):
            raise CodegenError(f"vector dtype {dtype!r}: the C backend needs a power-of-two lane count")
        name = f"kiln_{HELPER_SUFFIX[elem]}x{lanes}"
        self.vector_types.setdefault(
            name, f"typedef {elem} {name} __attribute__((vector_size({lanes * SIZEOF[elem]})));")
        return name

    def extern(self, name: str, prototype: str) -> None:
        if self.externs.setdefault(name, prototype) != prototype:
            raise CodegenError(f"runtime function {name} is called with two signatures: "
                               f"{self.externs[name]} and {prototype}")

    def lines(self) -> list[str]:
        return [*self.vector_types.values(), *self.externs.values()]

/* Kiln C runtime: pasted at the top of every generated module so the source is self-contained.
 * float16/bfloat16 live in memory as uint16_t, float8/float4 as uint8_t; all are computed as float. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#if defined(__F16C__) && !defined(KILN_SOFT_F16)
#include <immintrin.h>
#endif

/* The uniform kernel ABI: int32_t f(const kiln_value_t* args, int32_t num_args). */
typedef union { int64_t i; double f; void* p; } kiln_value_t;
#define KILN_OK 0
#define KILN_ERR_NUM_ARGS (-1)
#define KILN_ERR_ALLOC (-2)
#define KILN_ERR_INDEX (-4) /* -3 is the runtime library's KILN_ERR_BAD_ARG */

/* A gathered index i checked against its dim n: i itself when 0 <= i < n; else the kernel's error
 * flag says KILN_ERR_INDEX and 0 is read instead, so a bad index never reads outside the buffer. */
static inline int64_t kiln_check_index(int64_t i, int64_t n, int32_t* flag) {
  if (__builtin_expect(i >= 0 && i < n, 1)) return i;
  __atomic_store_n(flag, KILN_ERR_INDEX, __ATOMIC_RELAXED);
  return 0;
}

static inline uint32_t kiln_f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float kiln_bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

#if defined(__F16C__) && !defined(KILN_SOFT_F16)
static inline float kiln_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
static inline uint16_t kiln_f32_to_f16(float x) { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }
#else
static inline float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return kiln_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {  /* zero or subnormal: man * 2^-24 is exact in float */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return kiln_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
static inline uint16_t kiln_f32_to_f16(float x) {
  uint32_t u = kiln_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* NaN stays NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {  /* subnormal or zero: round a * 2^24 to nearest even */
    float v = kiln_bits_f32(a) * 16777216.0f;
    return (uint16_t)(sign | (uint32_t)nearbyintf(v));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  /* round to nearest even at bit 13 */
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
#endif

static inline float kiln_bf16_to_f32(uint16_t h) { return kiln_bits_f32((uint32_t)h << 16); }
static inline uint16_t kiln_f32_to_bf16(float x) {
  uint32_t u = kiln_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float kiln_round_f16(float x) { return kiln_f16_to_f32(kiln_f32_to_f16(x)); }
static inline float kiln_round_bf16(float x) { return kiln_bf16_to_f32(kiln_f32_to_bf16(x)); }

/* float8/float4 live in memory as uint8_t (float4_e2m1fn: one value per byte, low nibble) and are
 * computed as float. Decoding is exact. Encoding rounds to nearest even and does not saturate
 * (Cast's saturate clamps before it): overflow becomes inf (e5m2), the largest finite value (float4,
 * which has neither inf nor NaN) or NaN (the others). fnuz formats have one NaN (0x80) and no -0.
 * KILN_SMALL_FLOAT(S, M, BIAS, MAXCODE, KIND): S names the helpers, M mantissa bits, BIAS the
 * exponent bias, MAXCODE the largest finite magnitude code; KIND 0: NaN is S.1111.111 (e4m3fn),
 * 1: IEEE inf and NaN (e5m2), 2: fnuz, 3: no inf/NaN (float4). */
#define KILN_SMALL_FLOAT(S, M, BIAS, MAXCODE, KIND)                                         \
  static inline float kiln_##S##_to_f32(uint8_t c) {                                        \
    const uint32_t sbit = (KIND) == 3 ? 0x8u : 0x80u;                                       \
    uint32_t mag = c & (sbit - 1u), neg = (c & sbit) != 0, e = mag >> (M), m = mag & ((1u << (M)) - 1u); \
    float v;                                                                                \
    if ((KIND) == 2 && c == 0x80u) return NAN;                                              \
    if ((KIND) != 2 && (KIND) != 3 && mag > (MAXCODE)) {                                    \
      if ((KIND) == 1 && m == 0) return neg ? -INFINITY : INFINITY;                         \
      return neg ? -NAN : NAN;                                                              \
    }                                                                                       \
    if (e == 0) v = (float)m * ldexpf(1.0f, 1 - (BIAS) - (M));                              \
    else v = kiln_bits_f32(((e - (BIAS) + 127u) << 23) | (m << (23 - (M))));                \
    return neg ? -v : v;                                                                    \
  }                                                                                         \
  static inline uint8_t kiln_f32_to_##S(float x) {                                          \
    const uint32_t sbit = (KIND) == 3 ? 0x8u : 0x80u;                                       \
    uint32_t u = kiln_f32_bits(x), a = u & 0x7fffffffu, sign = (u >> 31) ? sbit : 0u, code; \
    if (a > 0x7f800000u) {                                                                  \
      if ((KIND) == 2) return 0x80u;                                                        \
      if ((KIND) == 3) return (uint8_t)(sign ^ sbit); /* no float4 NaN: ml_dtypes' -+0 */ \
      return (uint8_t)(sign | ((KIND) == 1 ? 0x7eu : 0x7fu));                               \
    }                                                                                       \
    if (a < ((uint32_t)(128 - (BIAS)) << 23)) { /* below the smallest normal */             \
      code = (uint32_t)nearbyintf(kiln_bits_f32(a) * ldexpf(1.0f, (BIAS) - 1 + (M)));       \
    } else if (a >= 0x7f800000u) {                                                          \
      code = (MAXCODE) + 1u;                                                                \
    } else {                                                                                \
      uint32_t r = a + ((1u << (22 - (M))) - 1u) + ((a >> (23 - (M))) & 1u);               \
      code = (r >> (23 - (M))) - ((uint32_t)(127 - (BIAS)) << (M));                         \
    }                                                                                       \
    if (code > (MAXCODE)) {                                                                 \
      if ((KIND) == 1) return (uint8_t)(sign | 0x7cu);                                      \
      if ((KIND) == 3) return (uint8_t)(sign | (MAXCODE));                                  \
      return (KIND) == 2 ? 0x80u : (uint8_t)(sign | 0x7fu);                                 \
    }                                                                                       \
    if ((KIND) == 2 && code == 0) return 0;                                                 \
    return (uint8_t)(sign | code);                                                          \
  }                                                                                         \
  static inline float kiln_round_##S(float x) { return kiln_##S##_to_f32(kiln_f32_to_##S(x)); }
KILN_SMALL_FLOAT(f8e4m3fn, 3, 7, 0x7eu, 0) KILN_SMALL_FLOAT(f8e4m3fnuz, 3, 8, 0x7fu, 2)
KILN_SMALL_FLOAT(f8e5m2, 2, 15, 0x7bu, 1) KILN_SMALL_FLOAT(f8e5m2fnuz, 2, 16, 0x7fu, 2)
KILN_SMALL_FLOAT(f4e2m1fn, 1, 1, 0x7u, 3)

/* float8_e8m0fnu: an unsigned power of two 2^(c-127), c = 0..254; 0xff is NaN (no zero, no inf).
 * Encoding rounds the float32 exponent field half up, like ml_dtypes (float32 subnormals too); zero,
 * negatives, inf and NaN become NaN. */
static inline float kiln_f8e8m0fnu_to_f32(uint8_t c) {
  return c == 0xffu ? NAN : kiln_bits_f32(c ? (uint32_t)c << 23 : 0x00400000u);
}
static inline uint8_t kiln_f32_to_f8e8m0fnu(float x) {
  uint32_t u = kiln_f32_bits(x), e = u >> 23;
  if (u == 0 || (u >> 31) || e == 0xffu) return 0xffu;
  e = e ? e + ((u & 0x7fffffu) >= 0x400000u) : (u & 0x7fffffu) > 0x400000u;  /* 2^-127 is code 0 */
  return e > 0xfeu ? 0xffu : (uint8_t)e;
}
static inline float kiln_round_f8e8m0fnu(float x) { return kiln_f8e8m0fnu_to_f32(kiln_f32_to_f8e8m0fnu(x)); }

/* int4/uint4/int2/uint2 live one value per byte, in its low bits (ml_dtypes' layout), and are computed
 * as int8_t/uint8_t. kiln_wrap_* reduces an integer into the type's range (two's complement: the low
 * bits, sign-extended): it decodes a stored byte, and kiln_wrap_u4/u2 encode one. A float
 * converts like ml_dtypes: truncated to int32 (NaN and values outside int32 give INT32_MIN, whose low
 * bits are 0), then wrapped. */
static inline int8_t kiln_wrap_i4(int64_t v) { return (int8_t)((int32_t)((v & 0xf) ^ 0x8) - 0x8); }
static inline uint8_t kiln_wrap_u4(int64_t v) { return (uint8_t)(v & 0xf); }
static inline int8_t kiln_wrap_i2(int64_t v) { return (int8_t)((int32_t)((v & 0x3) ^ 0x2) - 0x2); }
static inline uint8_t kiln_wrap_u2(int64_t v) { return (uint8_t)(v & 0x3); }
static inline int64_t kiln_trunc_i32(double x) {
  return (x > -2147483649.0 && x < 2147483648.0) ? (int64_t)(int32_t)x : 0;
}

/* float64 -> float rounded to odd: a later round-to-nearest to any format with at most 22 significand
 * bits (float16 and narrower) then equals rounding the double directly (no double rounding). */
static inline float kiln_f64_to_f32_odd(double x) {
  float f = (float)x;
  if ((double)f == x || f != f) return f;
  if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);  /* truncate toward zero ... */
  return kiln_bits_f32(kiln_f32_bits(f) | 1u);                /* ... and make it odd */
}

static inline float kiln_sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double kiln_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Integer floor division/modulo (round toward -inf); C's / and % truncate. */
#define KILN_FLOOR_INT(T, S)                                                          \
  static inline T kiln_floordiv_##S(T a, T b) {                                       \
    T q = a / b, r = a % b; return (T)(q - ((r != 0) & ((r ^ b) < 0))); }            \
  static inline T kiln_floormod_##S(T a, T b) {                                       \
    T r = a % b; return (T)(r + (((r != 0) & ((r ^ b) < 0)) ? b : 0)); }
KILN_FLOOR_INT(int8_t, i8) KILN_FLOOR_INT(int16_t, i16) KILN_FLOOR_INT(int32_t, i32) KILN_FLOOR_INT(int64_t, i64)

static inline float kiln_floormod_f32(float a, float b) {
  float r = fmodf(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline double kiln_floormod_f64(double a, double b) {
  double r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }

/* min/max; the float versions propagate NaN like numpy.minimum/maximum. */
#define KILN_MINMAX_INT(T, S)                                                          \
  static inline T kiln_min_##S(T a, T b) { return a < b ? a : b; }                     \
  static inline T kiln_max_##S(T a, T b) { return a > b ? a : b; }
/* NaN in either argument gives NaN. The test of b comes first: with a constant bound (clip, relu6)
 * it folds, and the rest is one vminps/vmaxps; testing a first cost ~25 instructions per vector. */
#define KILN_MINMAX_FLOAT(T, S)                                                        \
  static inline T kiln_min_##S(T a, T b) { return (b != b) ? b : ((b < a) ? b : a); }  \
  static inline T kiln_max_##S(T a, T b) { return (b != b) ? b : ((b > a) ? b : a); }
KILN_MINMAX_INT(int8_t, i8) KILN_MINMAX_INT(int16_t, i16) KILN_MINMAX_INT(int32_t, i32)
KILN_MINMAX_INT(int64_t, i64) KILN_MINMAX_INT(uint8_t, u8) KILN_MINMAX_INT(uint16_t, u16)
KILN_MINMAX_INT(uint32_t, u32) KILN_MINMAX_INT(uint64_t, u64)
KILN_MINMAX_FLOAT(float, f32) KILN_MINMAX_FLOAT(double, f64)

/* Heap temporaries: 64-byte aligned, never a zero-size request (NULL would read as failure). */
static inline void* kiln_alloc(int64_t bytes) {
  size_t n = bytes > 0 ? ((size_t)bytes + 63u) / 64u * 64u : 64u;
  return aligned_alloc(64, n);
}

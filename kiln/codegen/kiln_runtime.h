/* Kiln C runtime: pasted at the top of every generated module so the source is self-contained.
 * float16/bfloat16 live in memory as uint16_t and are computed as float. */
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

static inline float kiln_sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double kiln_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Integer floor division/modulo (round toward -inf); C's / and % truncate. */
#define KILN_FLOOR_INT(T, S)                                                          \
  static inline T kiln_floordiv_##S(T a, T b) {                                       \
    T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; }      \
  static inline T kiln_floormod_##S(T a, T b) {                                       \
    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; }
KILN_FLOOR_INT(int8_t, i8) KILN_FLOOR_INT(int16_t, i16) KILN_FLOOR_INT(int32_t, i32) KILN_FLOOR_INT(int64_t, i64)

static inline float kiln_floormod_f32(float a, float b) {
  float r = fmodf(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline double kiln_floormod_f64(double a, double b) {
  double r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }

/* min/max; the float versions propagate NaN like numpy.minimum/maximum. */
#define KILN_MINMAX_INT(T, S)                                                          \
  static inline T kiln_min_##S(T a, T b) { return a < b ? a : b; }                     \
  static inline T kiln_max_##S(T a, T b) { return a > b ? a : b; }
#define KILN_MINMAX_FLOAT(T, S)                                                        \
  static inline T kiln_min_##S(T a, T b) { return (a < b || a != a) ? a : b; }         \
  static inline T kiln_max_##S(T a, T b) { return (a > b || a != a) ? a : b; }
KILN_MINMAX_INT(int8_t, i8) KILN_MINMAX_INT(int16_t, i16) KILN_MINMAX_INT(int32_t, i32)
KILN_MINMAX_INT(int64_t, i64) KILN_MINMAX_INT(uint8_t, u8) KILN_MINMAX_INT(uint16_t, u16)
KILN_MINMAX_INT(uint32_t, u32) KILN_MINMAX_INT(uint64_t, u64)
KILN_MINMAX_FLOAT(float, f32) KILN_MINMAX_FLOAT(double, f64)

/* Heap temporaries: 64-byte aligned, never a zero-size request (NULL would read as failure). */
static inline void* kiln_alloc(int64_t bytes) {
  size_t n = bytes > 0 ? ((size_t)bytes + 63u) / 64u * 64u : 64u;
  return aligned_alloc(64, n);
}

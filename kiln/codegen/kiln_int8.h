/* Kiln's int8 GEMM micro-kernels: one register tile of C[rows, cols] = A[rows, K] (uint8, or int8 read
 * as uint8 by flipping the sign bit) times a packed int8 panel W[ceil(K/4)][NR][4], summed exactly in
 * int32. kiln/topi/qgemm.py lowers every integer GEMM to loops over these tiles (the tir intrinsic
 * `kiln_i8_tile_*`, spelled by kiln/codegen/intrinsics.py); the panel layout is
 * kiln/op/qgemm.py's pack_weight.
 *
 * avx2:       vpmaddubsw (u8 x s8 pairs to s16, saturating) then vpmaddwd by 1 to s32. Exact only when
 *             every pair of adjacent weights has |w0| + |w1| <= 128 (255 * 128 fits s16): the
 *             packer checks that and picks this kernel only then.
 * avx2_split: any weights: a = 2 * (a >> 1) + (a & 1), each half a 7-bit (or 1-bit) operand whose
 *             vpmaddubsw cannot saturate (127 * 128 * 2 < 32768); the halves meet after vpmaddwd (the
 *             high one shifted left by 1).
 * vnni:       vpdpbusd (AVX-512 VNNI): four u8 x s8 products summed into s32 in one instruction.
 * Functions carry their ISA in a target attribute, so every variant compiles whatever -march says;
 * the build picks the one the target's CPU has. Rows past `rows` read row rows-1 again and are not
 * stored; columns past `cols` are not stored (the panel is zero there). `flip` and `split` are constants in
 * each instantiation of a body: without a flip the row bytes broadcast straight from memory. */
#include <immintrin.h>

/* Accumulators are named variables, not arrays: gcc keeps arrays of vectors on the stack. The depth runs
 * as whole quads of four bytes, then one zero-padded tail quad. */

/* the four bytes of a row at k..k+3 as one int32 (zero past `len`), sign bits flipped by `mask` */
static inline int32_t kiln_i8_quad(const uint8_t* row, int64_t k, int64_t len, uint32_t mask) {
  uint32_t v = 0;
  __builtin_memcpy(&v, row + k, (size_t)(len - k < 4 ? len - k : 4));
  return (int32_t)(v ^ mask);
}

static inline int32_t kiln_i8_quad4(const uint8_t* p, uint32_t mask) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return (int32_t)(v ^ mask);
}

#define KILN_I8_ROW(r) const uint8_t* a##r = a + ((r) < rows ? (r) : rows - 1) * lda;

/* AVX2: one row's step over the panel's two vectors w0, w1 */
#define KILN_I8_AVX2_STEP(c0, c1, quad)                                                                    \
  {                                                                                                        \
    const __m256i ab = _mm256_set1_epi32(quad);                                                            \
    if (!split) {                                                                                          \
      c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(ab, w0), ones));                    \
      c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(ab, w1), ones));                    \
    } else {                                                                                               \
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ab, 1), low7), lo = _mm256_and_si256(ab, bit0); \
      c0 = _mm256_add_epi32(c0, _mm256_add_epi32(_mm256_slli_epi32(_mm256_madd_epi16(                       \
                   _mm256_maddubs_epi16(hi, w0), ones), 1), _mm256_madd_epi16(_mm256_maddubs_epi16(lo, w0), ones))); \
      c1 = _mm256_add_epi32(c1, _mm256_add_epi32(_mm256_slli_epi32(_mm256_madd_epi16(                       \
                   _mm256_maddubs_epi16(hi, w1), ones), 1), _mm256_madd_epi16(_mm256_maddubs_epi16(lo, w1), ones))); \
    }                                                                                                      \
  }

#define KILN_I8_AVX2_STORE(r, c0, c1)                                                                      \
  if ((r) < rows) {                                                                                        \
    if (cols == 16) {                                                                                      \
      _mm256_storeu_si256((__m256i*)(c + (r) * ldc), c0);                                                  \
      _mm256_storeu_si256((__m256i*)(c + (r) * ldc + 8), c1);                                              \
    } else {                                                                                               \
      int32_t t[16];                                                                                       \
      _mm256_storeu_si256((__m256i*)t, c0);                                                                \
      _mm256_storeu_si256((__m256i*)(t + 8), c1);                                                          \
      __builtin_memcpy(c + (r) * ldc, t, (size_t)cols * sizeof(int32_t));                                  \
    }                                                                                                      \
  }

__attribute__((target("avx2,fma"), always_inline))
static inline void kiln_i8_tile_avx2_body(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                                          int32_t* c, int64_t ldc, int64_t cols, const int flip, const int split) {
  KILN_I8_ROW(0) KILN_I8_ROW(1) KILN_I8_ROW(2) KILN_I8_ROW(3)
  const uint32_t mask = flip ? 0x80808080u : 0u;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low7 = _mm256_set1_epi8(0x7f), bit0 = _mm256_set1_epi8(1);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  const int64_t whole = k / 4;
  for (int64_t q = 0; q < whole; q++) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(w + q * 64));
    const __m256i w1 = _mm256_loadu_si256((const __m256i*)(w + q * 64 + 32));
    KILN_I8_AVX2_STEP(c00, c01, kiln_i8_quad4(a0 + 4 * q, mask))
    KILN_I8_AVX2_STEP(c10, c11, kiln_i8_quad4(a1 + 4 * q, mask))
    KILN_I8_AVX2_STEP(c20, c21, kiln_i8_quad4(a2 + 4 * q, mask))
    KILN_I8_AVX2_STEP(c30, c31, kiln_i8_quad4(a3 + 4 * q, mask))
  }
  if (whole * 4 < k) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(w + whole * 64));
    const __m256i w1 = _mm256_loadu_si256((const __m256i*)(w + whole * 64 + 32));
    KILN_I8_AVX2_STEP(c00, c01, kiln_i8_quad(a0, 4 * whole, k, mask))
    KILN_I8_AVX2_STEP(c10, c11, kiln_i8_quad(a1, 4 * whole, k, mask))
    KILN_I8_AVX2_STEP(c20, c21, kiln_i8_quad(a2, 4 * whole, k, mask))
    KILN_I8_AVX2_STEP(c30, c31, kiln_i8_quad(a3, 4 * whole, k, mask))
  }
  KILN_I8_AVX2_STORE(0, c00, c01) KILN_I8_AVX2_STORE(1, c10, c11)
  KILN_I8_AVX2_STORE(2, c20, c21) KILN_I8_AVX2_STORE(3, c30, c31)
}

__attribute__((target("avx2,fma"), noinline))
static void kiln_i8_tile_avx2(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                              int32_t* c, int64_t ldc, int64_t cols, int32_t flip) {
  if (flip) kiln_i8_tile_avx2_body(a, lda, rows, w, k, c, ldc, cols, 1, 0);
  else kiln_i8_tile_avx2_body(a, lda, rows, w, k, c, ldc, cols, 0, 0);
}

__attribute__((target("avx2,fma"), noinline))
static void kiln_i8_tile_avx2_split(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                                    int32_t* c, int64_t ldc, int64_t cols, int32_t flip) {
  if (flip) kiln_i8_tile_avx2_body(a, lda, rows, w, k, c, ldc, cols, 1, 1);
  else kiln_i8_tile_avx2_body(a, lda, rows, w, k, c, ldc, cols, 0, 1);
}

/* VNNI: 8 rows x 32 columns, 16 zmm accumulators */
#define KILN_I8_VNNI_STEP(c0, c1, quad)                \
  {                                                    \
    const __m512i ab = _mm512_set1_epi32(quad);        \
    c0 = _mm512_dpbusd_epi32(c0, ab, w0);              \
    c1 = _mm512_dpbusd_epi32(c1, ab, w1);              \
  }
#define KILN_I8_VNNI_ROWS(QUAD)                                                                            \
  KILN_I8_VNNI_STEP(c00, c01, QUAD(a0)) KILN_I8_VNNI_STEP(c10, c11, QUAD(a1))                              \
  KILN_I8_VNNI_STEP(c20, c21, QUAD(a2)) KILN_I8_VNNI_STEP(c30, c31, QUAD(a3))                              \
  KILN_I8_VNNI_STEP(c40, c41, QUAD(a4)) KILN_I8_VNNI_STEP(c50, c51, QUAD(a5))                              \
  KILN_I8_VNNI_STEP(c60, c61, QUAD(a6)) KILN_I8_VNNI_STEP(c70, c71, QUAD(a7))
#define KILN_I8_VNNI_STORE(r, c0, c1)                                                                      \
  if ((r) < rows) {                                                                                        \
    _mm512_mask_storeu_epi32(c + (r) * ldc, m0, c0);                                                       \
    _mm512_mask_storeu_epi32(c + (r) * ldc + 16, m1, c1);                                                  \
  }

__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline))
static inline void kiln_i8_tile_vnni_body(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                                          int32_t* c, int64_t ldc, int64_t cols, const int flip) {
  KILN_I8_ROW(0) KILN_I8_ROW(1) KILN_I8_ROW(2) KILN_I8_ROW(3)
  KILN_I8_ROW(4) KILN_I8_ROW(5) KILN_I8_ROW(6) KILN_I8_ROW(7)
  const uint32_t mask = flip ? 0x80808080u : 0u;
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
          c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const int64_t whole = k / 4;
  for (int64_t q = 0; q < whole; q++) {
    const __m512i w0 = _mm512_loadu_si512((const void*)(w + q * 128));
    const __m512i w1 = _mm512_loadu_si512((const void*)(w + q * 128 + 64));
#define KILN_I8_WHOLE(row) kiln_i8_quad4(row + 4 * q, mask)
    KILN_I8_VNNI_ROWS(KILN_I8_WHOLE)
#undef KILN_I8_WHOLE
  }
  if (whole * 4 < k) {
    const __m512i w0 = _mm512_loadu_si512((const void*)(w + whole * 128));
    const __m512i w1 = _mm512_loadu_si512((const void*)(w + whole * 128 + 64));
#define KILN_I8_TAIL(row) kiln_i8_quad(row, 4 * whole, k, mask)
    KILN_I8_VNNI_ROWS(KILN_I8_TAIL)
#undef KILN_I8_TAIL
  }
  const __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xffff : (1u << cols) - 1);
  const __mmask16 m1 = (__mmask16)(cols >= 32 ? 0xffff : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  KILN_I8_VNNI_STORE(0, c00, c01) KILN_I8_VNNI_STORE(1, c10, c11) KILN_I8_VNNI_STORE(2, c20, c21)
  KILN_I8_VNNI_STORE(3, c30, c31) KILN_I8_VNNI_STORE(4, c40, c41) KILN_I8_VNNI_STORE(5, c50, c51)
  KILN_I8_VNNI_STORE(6, c60, c61) KILN_I8_VNNI_STORE(7, c70, c71)
}

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline))
static void kiln_i8_tile_vnni(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                              int32_t* c, int64_t ldc, int64_t cols, int32_t flip) {
  if (flip) kiln_i8_tile_vnni_body(a, lda, rows, w, k, c, ldc, cols, 1);
  else kiln_i8_tile_vnni_body(a, lda, rows, w, k, c, ldc, cols, 0);
}

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
 *             vpmaddubsw cannot saturate (127 * 128 * 2 < 32768); the halves meet in vpmaddwd by 2 and 1.
 * vnni:       vpdpbusd (AVX-512 VNNI): four u8 x s8 products summed into s32 in one instruction.
 * Functions carry their ISA in a target attribute, so every variant compiles whatever -march says;
 * the build picks the one the target's CPU has. Rows past `rows` read row rows-1 again and are not
 * stored; columns past `cols` are not stored (the panel is zero there). */
#include <immintrin.h>

/* four bytes of a row starting at k as one int32, zero past `len`, sign bits flipped by `mask` */
static inline int32_t kiln_i8_quad(const uint8_t* row, int64_t k, int64_t len, uint32_t mask) {
  uint32_t v = 0;
  if (k + 4 <= len) __builtin_memcpy(&v, row + k, 4);
  else __builtin_memcpy(&v, row + k, (size_t)(len - k));
  return (int32_t)(v ^ mask);
}

#define KILN_I8_ROWS(MR)                                              \
  const uint8_t* ar[MR];                                              \
  for (int r = 0; r < MR; r++) ar[r] = a + (r < rows ? r : rows - 1) * lda; \
  const uint32_t mask = flip ? 0x80808080u : 0u;                      \
  const int64_t k4 = (k + 3) / 4;

__attribute__((target("avx2,fma"), always_inline))
static inline void kiln_i8_tile_avx2_body(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                                          int32_t* c, int64_t ldc, int64_t cols, int32_t flip, const int split) {
  enum { MR = 4, NR = 16 };
  KILN_I8_ROWS(MR)
  __m256i acc[MR][2];
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1), twos = _mm256_set1_epi16(2);
  const __m256i low7 = _mm256_set1_epi8(0x7f), bit0 = _mm256_set1_epi8(1);
  for (int64_t q = 0; q < k4; q++) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(w + q * 64));
    const __m256i w1 = _mm256_loadu_si256((const __m256i*)(w + q * 64 + 32));
    for (int r = 0; r < MR; r++) {
      const __m256i ab = _mm256_set1_epi32(kiln_i8_quad(ar[r], 4 * q, k, mask));
      if (!split) {
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(ab, w0), ones));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(ab, w1), ones));
      } else {
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ab, 1), low7), lo = _mm256_and_si256(ab, bit0);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, w0), twos),
                                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(lo, w0), ones)));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, w1), twos),
                                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(lo, w1), ones)));
      }
    }
  }
  for (int r = 0; r < MR && r < rows; r++) {
    if (cols == NR) {
      _mm256_storeu_si256((__m256i*)(c + r * ldc), acc[r][0]);
      _mm256_storeu_si256((__m256i*)(c + r * ldc + 8), acc[r][1]);
    } else {
      int32_t t[NR];
      _mm256_storeu_si256((__m256i*)t, acc[r][0]);
      _mm256_storeu_si256((__m256i*)(t + 8), acc[r][1]);
      __builtin_memcpy(c + r * ldc, t, (size_t)cols * sizeof(int32_t));
    }
  }
}

__attribute__((target("avx2,fma"), noinline))
static void kiln_i8_tile_avx2(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                              int32_t* c, int64_t ldc, int64_t cols, int32_t flip) {
  kiln_i8_tile_avx2_body(a, lda, rows, w, k, c, ldc, cols, flip, 0);
}

__attribute__((target("avx2,fma"), noinline))
static void kiln_i8_tile_avx2_split(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                                    int32_t* c, int64_t ldc, int64_t cols, int32_t flip) {
  kiln_i8_tile_avx2_body(a, lda, rows, w, k, c, ldc, cols, flip, 1);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline))
static void kiln_i8_tile_vnni(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* w, int64_t k,
                              int32_t* c, int64_t ldc, int64_t cols, int32_t flip) {
  enum { MR = 8, NR = 32 };
  KILN_I8_ROWS(MR)
  __m512i acc[MR][2];
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  for (int64_t q = 0; q < k4; q++) {
    const __m512i w0 = _mm512_loadu_si512((const void*)(w + q * 128));
    const __m512i w1 = _mm512_loadu_si512((const void*)(w + q * 128 + 64));
    for (int r = 0; r < MR; r++) {
      const __m512i ab = _mm512_set1_epi32(kiln_i8_quad(ar[r], 4 * q, k, mask));
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], ab, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], ab, w1);
    }
  }
  const __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xffff : (1u << cols) - 1);
  const __mmask16 m1 = (__mmask16)(cols >= 32 ? 0xffff : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  for (int r = 0; r < MR && r < rows; r++) {
    _mm512_mask_storeu_epi32(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_epi32(c + r * ldc + 16, m1, acc[r][1]);
  }
}
#undef KILN_I8_ROWS

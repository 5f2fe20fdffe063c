/* Kiln's shape-generic kernels: the first tier of a session (kiln.runtime.generic_executor).
 *
 * Every size is an argument, so one library serves every model: it is built once per machine and target
 * into the compile cache (kiln.codegen.generic_library) and a new model runs on it at once, while its
 * specialized kernels compile. float32, NCHW, row-major, contiguous unless a leading dimension is given.
 * Parallel loops are OpenMP's, each with an `if` so that small calls stay on the calling thread.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KILN_GENERIC_ABI 1
#define MR 6            /* rows of C one tile keeps in registers */
#define NR 16           /* columns of C one tile keeps in registers (two 8-float vectors) */
#define STREAM_N 256    /* columns of B one thread streams when C has fewer than MR rows */
#define PAR_WORK 32768  /* multiply-adds below which a call runs on one thread */

typedef int64_t i64;

int kiln_generic_abi(void) { return KILN_GENERIC_ABI; }

static inline i64 min64(i64 a, i64 b) { return a < b ? a : b; }

/* 8 floats, loaded and stored unaligned: one AVX2 register, half an AVX-512 one, two SSE ones */
typedef float v8 __attribute__((vector_size(32), aligned(4)));

/* C[MR x NR] = A[MR x K] B[K x NR]: the MR x NR accumulators stay in registers for the whole K loop
 * (spelled with vectors: gcc keeps an array of them on the stack) */
static void tile_full(i64 K, const float *restrict A, i64 lda, const float *restrict B, i64 ldb,
                      float *restrict C, i64 ldc) {
  v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0}, c40 = {0},
     c41 = {0}, c50 = {0}, c51 = {0};
  for (i64 k = 0; k < K; k++) {
    v8 b0 = *(const v8 *)(B + k * ldb), b1 = *(const v8 *)(B + k * ldb + 8);
    float a0 = A[k], a1 = A[lda + k], a2 = A[2 * lda + k], a3 = A[3 * lda + k], a4 = A[4 * lda + k],
          a5 = A[5 * lda + k];
    c00 += a0 * b0, c01 += a0 * b1, c10 += a1 * b0, c11 += a1 * b1, c20 += a2 * b0, c21 += a2 * b1;
    c30 += a3 * b0, c31 += a3 * b1, c40 += a4 * b0, c41 += a4 * b1, c50 += a5 * b0, c51 += a5 * b1;
  }
  v8 *row[MR] = {(v8 *)C, (v8 *)(C + ldc), (v8 *)(C + 2 * ldc), (v8 *)(C + 3 * ldc), (v8 *)(C + 4 * ldc),
                 (v8 *)(C + 5 * ldc)};
  row[0][0] = c00, row[0][1] = c01, row[1][0] = c10, row[1][1] = c11, row[2][0] = c20, row[2][1] = c21;
  row[3][0] = c30, row[3][1] = c31, row[4][0] = c40, row[4][1] = c41, row[5][0] = c50, row[5][1] = c51;
}

/* the same on fewer than MR rows: one row at a time, each in two vector accumulators */
static void tile_rows(i64 K, i64 m, const float *restrict A, i64 lda, const float *restrict B, i64 ldb,
                      float *restrict C, i64 ldc) {
  for (i64 r = 0; r < m; r++) {
    v8 c0 = {0}, c1 = {0};
    for (i64 k = 0; k < K; k++) {
      float a = A[r * lda + k];
      c0 += a * *(const v8 *)(B + k * ldb), c1 += a * *(const v8 *)(B + k * ldb + 8);
    }
    *(v8 *)(C + r * ldc) = c0, *(v8 *)(C + r * ldc + 8) = c1;
  }
}

/* the same on a partial tile (the right or bottom edge of C) */
static void tile_edge(i64 K, i64 m, i64 n, const float *restrict A, i64 lda, const float *restrict B, i64 ldb,
                      float *restrict C, i64 ldc) {
  float acc[MR][NR] = {{0}};
  for (i64 k = 0; k < K; k++) {
    const float *b = B + k * ldb;
    for (i64 r = 0; r < m; r++) {
      float a = A[r * lda + k];
      for (i64 j = 0; j < n; j++) acc[r][j] += a * b[j];
    }
  }
  for (i64 r = 0; r < m; r++) memcpy(C + r * ldc, acc[r], (size_t)n * sizeof(float));
}

/* C[m x n] = A[m x K] B[K x n] for a few rows (a matrix-vector product, most often): B streamed row by row,
 * n contiguous floats at a time, which the hardware prefetches (a 16-column tile would touch a new page per k) */
static void rows_stream(i64 K, i64 m, i64 n, const float *restrict A, i64 lda, const float *restrict B, i64 ldb,
                        float *restrict C, i64 ldc) {
  for (i64 r = 0; r < m; r++) {
    float *restrict c = C + r * ldc;
    memset(c, 0, (size_t)n * sizeof(float));
    for (i64 k = 0; k < K; k++) {
      float a = A[r * lda + k];
      const float *restrict b = B + k * ldb;
      for (i64 j = 0; j < n; j++) c[j] += a * b[j];
    }
  }
}

/* C[M x N] = A[M x K] B[K x N]; column panels outside, so a panel of B stays in cache over all of A's rows */
void kiln_gemm(i64 M, i64 N, i64 K, const float *A, i64 lda, const float *B, i64 ldb, float *C, i64 ldc) {
  if (M < MR) {
    i64 blocks = (N + STREAM_N - 1) / STREAM_N;
#pragma omp parallel for schedule(static) if (M * N * K > PAR_WORK)
    for (i64 jb = 0; jb < blocks; jb++)
      rows_stream(K, M, min64(STREAM_N, N - jb * STREAM_N), A, lda, B + jb * STREAM_N, ldb, C + jb * STREAM_N, ldc);
    return;
  }
  i64 mt = (M + MR - 1) / MR, nt = (N + NR - 1) / NR;
#pragma omp parallel for collapse(2) schedule(static) if (M * N * K > PAR_WORK)
  for (i64 jt = 0; jt < nt; jt++)
    for (i64 it = 0; it < mt; it++) {
      i64 i = it * MR, j = jt * NR, m = min64(MR, M - i), n = min64(NR, N - j);
      if (m == MR && n == NR)
        tile_full(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
      else if (n == NR)
        tile_rows(K, m, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
      else
        tile_edge(K, m, n, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
    }
}

/* one (batch, group) image's columns: col[(c, kh, kw)][(oh, ow)], zero where the window is in the padding */
static void im2col(const float *x, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 OH, i64 OW, i64 sh, i64 sw, i64 ph,
                   i64 pw, i64 dh, i64 dw, float *col) {
#pragma omp parallel for schedule(static) if (C * KH * KW * OH * OW > PAR_WORK)
  for (i64 row = 0; row < C * KH * KW; row++) {
    i64 c = row / (KH * KW), kh = row / KW % KH, kw = row % KW;
    float *out = col + row * OH * OW;
    for (i64 oh = 0; oh < OH; oh++) {
      i64 ih = oh * sh - ph + kh * dh;
      float *o = out + oh * OW;
      if (ih < 0 || ih >= H) {
        memset(o, 0, (size_t)OW * sizeof(float));
        continue;
      }
      const float *in = x + (c * H + ih) * W;
      for (i64 ow = 0; ow < OW; ow++) {
        i64 iw = ow * sw - pw + kw * dw;
        o[ow] = iw >= 0 && iw < W ? in[iw] : 0.0f;
      }
    }
  }
}

/* a depthwise convolution (one input and one output channel per group), directly */
static void depthwise(i64 N, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 OH, i64 OW, i64 sh, i64 sw, i64 ph, i64 pw,
                      i64 dh, i64 dw, const float *x, const float *w, float *y) {
#pragma omp parallel for schedule(static) if (N * C * OH * OW * KH * KW > PAR_WORK)
  for (i64 nc = 0; nc < N * C; nc++) {
    const float *in = x + nc * H * W, *k = w + nc % C * KH * KW;
    float *out = y + nc * OH * OW;
    for (i64 oh = 0; oh < OH; oh++)
      for (i64 ow = 0; ow < OW; ow++) {
        float s = 0.0f;
        for (i64 kh = 0; kh < KH; kh++) {
          i64 ih = oh * sh - ph + kh * dh;
          if (ih < 0 || ih >= H) continue;
          for (i64 kw = 0; kw < KW; kw++) {
            i64 iw = ow * sw - pw + kw * dw;
            if (iw >= 0 && iw < W) s += in[ih * W + iw] * k[kh * KW + kw];
          }
        }
        out[oh * OW + ow] = s;
      }
  }
}

/* y[N, M, OH, OW] = conv2d(x[N, C, H, W], w[M, C/group, KH, KW]) + bias[M] (bias may be NULL).
 * `col` is scratch of (C/group)*KH*KW*OH*OW floats, unused by 1x1 stride-1 unpadded and depthwise calls.
 * geom: KH, KW, OH, OW, sh, sw, ph (top), pw (left), dh, dw */
void kiln_conv2d(i64 N, i64 C, i64 H, i64 W, i64 M, i64 group, const i64 *geom, const float *x, const float *w,
                 const float *bias, float *y, float *col) {
  i64 KH = geom[0], KW = geom[1], OH = geom[2], OW = geom[3], sh = geom[4], sw = geom[5], ph = geom[6],
      pw = geom[7], dh = geom[8], dw = geom[9];
  i64 cg = C / group, mg = M / group, K = cg * KH * KW, P = OH * OW;
  if (cg == 1 && mg == 1) {
    depthwise(N, C, H, W, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, x, w, y);
  } else {
    int direct = KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
    for (i64 n = 0; n < N; n++)
      for (i64 g = 0; g < group; g++) {
        const float *xg = x + (n * C + g * cg) * H * W;
        if (!direct) im2col(xg, cg, H, W, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, col);
        kiln_gemm(mg, P, K, w + g * mg * K, K, direct ? xg : col, P, y + (n * M + g * mg) * P, P);
      }
  }
  if (bias == NULL) return;
#pragma omp parallel for schedule(static) if (N * M * P > PAR_WORK)
  for (i64 nm = 0; nm < N * M; nm++) {
    float b = bias[nm % M], *o = y + nm * P;
    for (i64 p = 0; p < P; p++) o[p] += b;
  }
}

/* 2-d max or average pooling of x[planes, H, W] into y[planes, OH, OW].
 * geom: KH, KW, OH, OW, sh, sw, ph (top), pw (left), dh, dw, ph_end, pw_end (explicit end padding).
 * average: 0 max, 1 average over the taps in the image, 2 average counting the explicit padding too */
void kiln_pool2d(i64 planes, i64 H, i64 W, const i64 *geom, int average, const float *x, float *y) {
  i64 KH = geom[0], KW = geom[1], OH = geom[2], OW = geom[3], sh = geom[4], sw = geom[5], ph = geom[6],
      pw = geom[7], dh = geom[8], dw = geom[9], phe = geom[10], pwe = geom[11];
#pragma omp parallel for schedule(static) if (planes * OH * OW * KH * KW > PAR_WORK)
  for (i64 p = 0; p < planes; p++) {
    const float *in = x + p * H * W;
    float *out = y + p * OH * OW;
    for (i64 oh = 0; oh < OH; oh++)
      for (i64 ow = 0; ow < OW; ow++) {
        float best = -INFINITY, sum = 0.0f;
        i64 seen = 0, counted = 0;
        for (i64 kh = 0; kh < KH; kh++) {
          i64 ih = oh * sh - ph + kh * dh;
          for (i64 kw = 0; kw < KW; kw++) {
            i64 iw = ow * sw - pw + kw * dw;
            counted += ih < H + phe && iw < W + pwe;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            float v = in[ih * W + iw];
            best = v > best ? v : best;
            sum += v;
            seen++;
          }
        }
        out[oh * OW + ow] = average == 0 ? best : sum / (float)(average == 2 ? counted : seen);
      }
  }
}

/* y[planes] = the mean of each of x's planes of `size` elements */
void kiln_plane_mean(i64 planes, i64 size, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (planes * size > PAR_WORK)
  for (i64 p = 0; p < planes; p++) {
    double s = 0.0;
    for (i64 i = 0; i < size; i++) s += x[p * size + i];
    y[p] = (float)(s / (double)size);
  }
}

/* y = x * scale[c] + shift[c] over x[N, C, size], then max(y, 0) when `relu` (inference batch norm) */
void kiln_channel_affine(i64 N, i64 C, i64 size, const float *x, const float *scale, const float *shift, int relu,
                         float *y) {
#pragma omp parallel for schedule(static) if (N * C * size > PAR_WORK)
  for (i64 nc = 0; nc < N * C; nc++) {
    float a = scale[nc % C], b = shift[nc % C];
    const float *in = x + nc * size;
    float *out = y + nc * size;
    for (i64 i = 0; i < size; i++) {
      float v = in[i] * a + b;
      out[i] = relu && v < 0.0f ? 0.0f : v;
    }
  }
}

/* y = max(x, 0), NaN kept */
void kiln_relu(i64 n, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (n > 8 * PAR_WORK)
  for (i64 i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* y = a + b, same shapes */
void kiln_add(i64 n, const float *a, const float *b, float *y) {
#pragma omp parallel for schedule(static) if (n > 8 * PAR_WORK)
  for (i64 i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* Kiln's shape-generic kernels: the first tier of a session (kiln.runtime.generic_executor).
 *
 * Every size is an argument, so one library serves every model: it is built once per machine and target
 * into the compile cache (kiln.codegen.generic_library) and a new model runs on it at once, while its
 * specialized kernels compile. float32, NCHW, row-major unless strides are given.
 * Parallel loops are OpenMP's, each with an `if` so that small calls stay on the calling thread.
 *
 * The GEMM packs blocks of its operands (BLIS's scheme: a KC x NC panel of B shared by the threads, an
 * MC x KC block of A, both laid out in the order the register tile reads them), so every operand, strided or
 * transposed, is read at unit stride from cache. Convolutions and GEMMs end in one epilogue applied as the
 * result is stored (bias per row or column, a residual, a clamp: ReLU, ReLU6, Clip), so a conv + batch norm
 * (folded into the weights by the caller) + add + ReLU is one pass over its output.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KILN_GENERIC_ABI 5
#define MR 6            /* rows of C one tile keeps in registers */
#define NR 16           /* columns of C one tile keeps in registers (two 8-float vectors) */
#define KC 256          /* depth of one packed block: an NR-column sliver of B (16 KiB) stays in L1 */
#define MC 96           /* rows of one packed block of A (96 KiB: L2) */
#define NC 2048         /* columns of one packed panel of B (2 MiB: L3) */
#define PAR_WORK 262144 /* multiply-adds below which a call runs on one thread (~10 us of work: more than a
                           * parallel region's start and barrier cost on 2 cores) */

typedef int64_t i64;

int kiln_generic_abi(void) { return KILN_GENERIC_ABI; }

static inline i64 min64(i64 a, i64 b) { return a < b ? a : b; }

/* 8 floats: one AVX2 register, half an AVX-512 one, two SSE ones; v8u loads and stores unaligned */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* what a result gets as it is stored: + row_bias[i] + col_bias[j] + res[i, j], then clamped to [lo, hi]
 * (NaN kept, and lo > hi gives hi, as Clip's max-then-min does); NULL pointers add nothing */
typedef struct {
  const float *row_bias, *col_bias, *res;
  i64 ldr;
  float lo, hi;
} Epilogue;

static inline float finish(float v, const Epilogue *e, i64 i, i64 j) {
  if (e->row_bias) v += e->row_bias[i];
  if (e->col_bias) v += e->col_bias[j];
  if (e->res) v += e->res[i * e->ldr + j];
  v = v < e->lo ? e->lo : v;
  return v > e->hi ? e->hi : v;
}

/* ---------------------------------------------------------------------------------------------------
 * GEMM: C[M x N] = A[M x K] B[K x N] (then the epilogue), A(i, k) = A[i*rsa + k*csa], B likewise */

/* B read as a convolution's im2col matrix without writing it: B(k, p) is image x at channel k / (KH*KW),
 * tap (k / KW % KH, k % KW) of output pixel p (0 in the padding). geom as kiln_conv2d's */
typedef struct {
  const float *x;
  i64 H, W;
  const i64 *geom;
} Image;

typedef struct {
  i64 M, N, K;
  const float *A;
  i64 rsa, csa;
  const float *B;
  i64 rsb, csb;
  float *C;
  i64 ldc;
  Epilogue epi;
  const Image *image; /* when not NULL, B is this image's columns (B and its strides unused) */
  const float *packed_a; /* when not NULL, A as kiln_pack_a lays it out (A and its strides unused) */
} Gemm;

/* rows [i, i+m) x depth [p, p+kc) of A as MR-row slivers, each column of a sliver contiguous, zero-padded */
static void pack_a(const Gemm *g, i64 i, i64 m, i64 p, i64 kc, float *restrict dst) {
  for (i64 r = 0; r < MR; r++)
    for (i64 k = 0; k < kc; k++) dst[k * MR + r] = r < m ? g->A[(i + r) * g->rsa + (p + k) * g->csa] : 0.0f;
}

/* the image's columns [j, j+n) over depth [p, p+kc) as one NR-column sliver (zero-padded): the taps walked
 * in order without dividing, a sliver inside one output row read with no test when its taps are all in the
 * image */
static void pack_b_image(const Image *im, i64 p, i64 kc, i64 j, i64 n, float *restrict dst) {
  const i64 *g = im->geom;
  i64 KH = g[0], KW = g[1], OW = g[3], sh = g[4], sw = g[5], ph = g[6], pw = g[7], dh = g[8], dw = g[9];
  i64 H = im->H, W = im->W, c = p / (KH * KW), kh = p / KW % KH, kw = p % KW, oh0 = j / OW, ow0 = j % OW;
  int one_row = n == NR && ow0 + NR <= OW;
  for (i64 k = 0; k < kc; k++) {
    const float *plane = im->x + c * H * W;
    float *d = dst + k * NR;
    i64 ih = oh0 * sh - ph + kh * dh, iw = ow0 * sw - pw + kw * dw;
    if (one_row && ih >= 0 && ih < H && iw >= 0 && iw + (NR - 1) * sw < W) {
      const float *src = plane + ih * W + iw;
      if (sw == 1)
        memcpy(d, src, NR * sizeof(float));
      else
        for (i64 q = 0; q < NR; q++) d[q] = src[q * sw];
    } else {
      i64 oh = oh0, ow = ow0;
      for (i64 q = 0; q < NR; q++) {
        ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
        d[q] = q < n && ih >= 0 && ih < H && iw >= 0 && iw < W ? plane[ih * W + iw] : 0.0f;
        if (++ow == OW) ow = 0, oh++;
      }
    }
    if (++kw == KW) kw = 0, kh++;
    if (kh == KH) kh = 0, c++;
  }
}

/* depth [p, p+kc) x columns [j, j+n) of B as one NR-column sliver, each row contiguous, zero-padded */
static void pack_b(const Gemm *g, i64 p, i64 kc, i64 j, i64 n, float *restrict dst) {
  if (g->image) return pack_b_image(g->image, p, kc, j, n, dst);
  for (i64 k = 0; k < kc; k++) {
    const float *src = g->B + (p + k) * g->rsb + j * g->csb;
    float *d = dst + k * NR;
    if (g->csb == 1 && n == NR)
      memcpy(d, src, NR * sizeof(float));
    else
      for (i64 c = 0; c < NR; c++) d[c] = c < n ? src[c * g->csb] : 0.0f;
  }
}

/* the MR x NR tile of packed slivers a and b over depth kc, into t (row-major, NR wide): its accumulators
 * stay in registers for the whole depth */
static void tile(i64 kc, const float *restrict a, const float *restrict b, float *restrict t) {
  v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0}, c40 = {0},
     c41 = {0}, c50 = {0}, c51 = {0};
  for (i64 k = 0; k < kc; k++, a += MR, b += NR) {
    v8 b0 = *(const v8 *)b, b1 = *(const v8 *)(b + 8);
    c00 += a[0] * b0, c01 += a[0] * b1, c10 += a[1] * b0, c11 += a[1] * b1, c20 += a[2] * b0, c21 += a[2] * b1;
    c30 += a[3] * b0, c31 += a[3] * b1, c40 += a[4] * b0, c41 += a[4] * b1, c50 += a[5] * b0, c51 += a[5] * b1;
  }
  v8 *row = (v8 *)t;
  row[0] = c00, row[1] = c01, row[2] = c10, row[3] = c11, row[4] = c20, row[5] = c21;
  row[6] = c30, row[7] = c31, row[8] = c40, row[9] = c41, row[10] = c50, row[11] = c51;
}

/* max(v, lo) then min(_, hi) lane by lane, as `finish` does (a NaN lane compares false and is kept) */
static inline v8 clamp8(v8 v, v8 lo, v8 hi) {
  v8i below = v < lo, above;
  v = (v8)((below & (v8i)lo) | (~below & (v8i)v));
  above = v > hi;
  return (v8)((above & (v8i)hi) | (~above & (v8i)v));
}

/* a whole tile into C at (i, j), 8 lanes at a time: what `store` does on a full tile */
static void store_full(const Gemm *g, const float *t, i64 i, i64 j, int first, int last) {
  const Epilogue *e = &g->epi;
  v8 lo = {0}, hi = {0};
  lo += e->lo, hi += e->hi;
  for (i64 r = 0; r < MR; r++)
    for (i64 h = 0; h < NR; h += 8) {
      v8u *c = (v8u *)(g->C + (i + r) * g->ldc + j + h);
      v8 v = *(const v8 *)(t + r * NR + h);
      if (!first) v += *c;
      if (last) {
        if (e->row_bias) v += e->row_bias[i + r];
        if (e->col_bias) v += *(const v8u *)(e->col_bias + j + h);
        if (e->res) v += *(const v8u *)(e->res + (i + r) * e->ldr + j + h);
        v = clamp8(v, lo, hi);
      }
      *c = v;
    }
}

/* the tile's m x n corner into C at (i, j): added to what earlier depth blocks stored unless `first`, the
 * epilogue applied on the `last` block */
static void store(const Gemm *g, const float *t, i64 i, i64 j, i64 m, i64 n, int first, int last) {
  if (m == MR && n == NR) return store_full(g, t, i, j, first, last);
  for (i64 r = 0; r < m; r++) {
    float *c = g->C + (i + r) * g->ldc + j;
    const float *s = t + r * NR;
    for (i64 q = 0; q < n; q++) {
      float v = first ? s[q] : c[q] + s[q];
      c[q] = last ? finish(v, &g->epi, i + r, j + q) : v;
    }
  }
}

/* the blocked product: every thread walks the same blocks; the `omp for`s split each block's packing and
 * tiles among them (their barriers order packing before use) */
static void gemm_blocked(const Gemm *g, float *bp, float *ap) {
  i64 M = g->M, N = g->N, K = g->K;
#pragma omp parallel if (M * N * K > PAR_WORK)
  for (i64 jc = 0; jc < N; jc += NC) {
    i64 nc = min64(NC, N - jc), nb = (nc + NR - 1) / NR;
    for (i64 pc = 0; pc == 0 || pc < K; pc += KC) {
      i64 kc = min64(KC, K - pc);
      int first = pc == 0, last = pc + kc >= K;
#pragma omp for schedule(static)
      for (i64 jb = 0; jb < nb; jb++) pack_b(g, pc, kc, jc + jb * NR, min64(NR, nc - jb * NR), bp + jb * kc * NR);
      for (i64 ic = 0; ic < M; ic += MC) {
        i64 mc = min64(MC, M - ic), mb = (mc + MR - 1) / MR;
        const float *a = g->packed_a ? g->packed_a + pc * ((M + MR - 1) / MR * MR) + ic * kc : ap;
        if (!g->packed_a) {
#pragma omp for schedule(static)
          for (i64 ib = 0; ib < mb; ib++) pack_a(g, ic + ib * MR, min64(MR, mc - ib * MR), pc, kc, ap + ib * kc * MR);
        }
#pragma omp for collapse(2) schedule(static)
        for (i64 jb = 0; jb < nb; jb++)
          for (i64 ib = 0; ib < mb; ib++) {
            float t[MR * NR] __attribute__((aligned(32)));
            tile(kc, a + ib * kc * MR, bp + jb * kc * NR, t);
            store(g, t, ic + ib * MR, jc + jb * NR, min64(MR, mc - ib * MR), min64(NR, nc - jb * NR), first, last);
          }
      }
    }
  }
}

/* fewer than MR rows and B rows contiguous (a batch-1 dense layer): B streamed once, row by row, in column
 * blocks split among the threads */
static void gemm_rows(const Gemm *g) {
  i64 M = g->M, N = g->N, K = g->K, blocks = (N + 255) / 256;
#pragma omp parallel for schedule(static) if (M * N * K > PAR_WORK)
  for (i64 jb = 0; jb < blocks; jb++) {
    i64 j0 = jb * 256, n = min64(256, N - j0);
    float acc[256];
    for (i64 r = 0; r < M; r++) {
      memset(acc, 0, sizeof acc);
      for (i64 k = 0; k < K; k++) {
        float a = g->A[r * g->rsa + k * g->csa];
        const float *restrict b = g->B + k * g->rsb + j0;
        for (i64 j = 0; j < n; j++) acc[j] += a * b[j];
      }
      for (i64 j = 0; j < n; j++) g->C[r * g->ldc + j0 + j] = finish(acc[j], &g->epi, r, j0 + j);
    }
  }
}

static inline float hsum(v8 s) { return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])); }

/* outputs j..j+3 of row a: four dot products over the columns b + c*csb, sharing a's loads, each its own
 * accumulator (four independent chains of vector adds) */
static void dots4(i64 K, const float *restrict a, const float *restrict b, i64 csb, float out[4]) {
  i64 kv = K / 8 * 8;
  v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
  for (i64 k = 0; k < kv; k += 8) {
    v8 x = *(const v8u *)(a + k);
    s0 += x * *(const v8u *)(b + k), s1 += x * *(const v8u *)(b + csb + k);
    s2 += x * *(const v8u *)(b + 2 * csb + k), s3 += x * *(const v8u *)(b + 3 * csb + k);
  }
  out[0] = hsum(s0), out[1] = hsum(s1), out[2] = hsum(s2), out[3] = hsum(s3);
  for (i64 k = kv; k < K; k++)
    for (int c = 0; c < 4; c++) out[c] += a[k] * b[c * csb + k];
}

/* fewer than MR rows, B columns contiguous and A rows too (a dense layer's [N, K] weight read in place):
 * dot products, four columns at a time, each weight row read once for all of A's rows */
static void gemm_dots(const Gemm *g) {
  i64 M = g->M, N = g->N, K = g->K, quads = (N + 3) / 4;
#pragma omp parallel for schedule(static) if (M * N * K > PAR_WORK)
  for (i64 q = 0; q < quads; q++) {
    i64 j = min64(q * 4, N > 4 ? N - 4 : 0); /* the last quad overlaps the one before when 4 does not divide N */
    for (i64 r = 0; r < M; r++) {
      float v[4];
      if (N < 4) {
        for (i64 c = 0; c < N; c++) {
          v[c] = 0.0f;
          for (i64 k = 0; k < K; k++) v[c] += g->A[r * g->rsa + k] * g->B[(j + c) * g->csb + k];
        }
      } else {
        dots4(K, g->A + r * g->rsa, g->B + j * g->csb, g->csb, v);
      }
      for (i64 c = 0; c < 4 && j + c < N; c++) g->C[r * g->ldc + j + c] = finish(v[c], &g->epi, r, j + c);
    }
  }
}

static void gemm_run(const Gemm *g) {
  if (g->M == 0 || g->N == 0) return;
  if (g->M < MR && !g->image && g->csa == 1 && g->rsb == 1 && g->K > 0) return gemm_dots(g);
  if (g->M < MR && !g->image && g->csb == 1) return gemm_rows(g);
  i64 kc = min64(KC, g->K > 0 ? g->K : 1);
  float *bp = aligned_alloc(64, (size_t)(kc * (NC + NR)) * sizeof(float));
  float *ap = aligned_alloc(64, (size_t)(kc * (MC + MR)) * sizeof(float));
  if (bp && ap) gemm_blocked(g, bp, ap);
  free(bp);
  free(ap);
}

/* `batch` products C_b = A_b B_b + epilogue. d: batch, M, N, K, then element strides: A's batch, row, column;
 * B's batch, row, column; C's batch, row; res's batch, row. Biases are shared by the batch. Batches split
 * among the threads when there are several (each product then runs on one) */
void kiln_gemm(const i64 *d, const float *A, const float *B, float *C, const float *row_bias,
              const float *col_bias, const float *res, float lo, float hi) {
  i64 batch = d[0];
#pragma omp parallel for schedule(static) if (batch > 1 && batch * d[1] * d[2] * d[3] > PAR_WORK)
  for (i64 b = 0; b < batch; b++) {
    Gemm g = {d[1], d[2], d[3], A + b * d[4], d[5], d[6], B + b * d[7], d[8], d[9], C + b * d[10], d[11],
              {row_bias, col_bias, res ? res + b * d[12] : NULL, d[13], lo, hi}, NULL, NULL};
    gemm_run(&g);
  }
}

/* ---------------------------------------------------------------------------------------------------
 * convolution */

/* 8 floats from p, p+stride: unit stride loaded at once, stride 2 as the even lanes of two loads */
static inline __attribute__((always_inline)) v8 load_strided(const float *p, i64 stride) {
  if (stride == 1) return *(const v8u *)p;
  v8 a = *(const v8u *)p, b = *(const v8u *)(p + 8);
  if (stride == 2) return __builtin_shuffle(a, b, (v8i){0, 2, 4, 6, 8, 10, 12, 14});
  v8 r;
  for (int l = 0; l < 8; l++) r[l] = p[l * stride];
  return r;
}

/* The padded plane a depthwise conv reads: the image at (ph, pw) in zeros, wide and tall enough that every
 * tap of every output of a row rounded up to whole vectors (Wq columns) reads inside it, with no test */
typedef struct {
  i64 Wq, Hp, Wp;
} Padded;

static Padded padded(i64 H, i64 W, const i64 *geom) {
  i64 KH = geom[0], KW = geom[1], OH = geom[2], OW = geom[3], sh = geom[4], sw = geom[5], ph = geom[6],
      pw = geom[7], dh = geom[8], dw = geom[9], Wq = (OW + 7) / 8 * 8;
  i64 Hp = (OH - 1) * sh + (KH - 1) * dh + 1, Wp = (Wq - 1) * sw + (KW - 1) * dw + 2 + 8 * sw;
  return (Padded){Wq, Hp > ph + H ? Hp : ph + H, Wp > pw + W ? Wp : pw + W};
}

/* outputs of one row of a plane, Wq of them, 8 at a time with every tap in registers, into `row`. Inlined
 * with constant KH, KW, sw for the common windows, so the taps unroll */
static inline __attribute__((always_inline)) void depthwise_vectors(const float *top, const float *k, i64 Wp, i64 Wq,
                                                                    i64 KH, i64 KW, i64 sw, i64 dh, i64 dw,
                                                                    float *restrict row) {
  for (i64 ow = 0; ow < Wq; ow += 8) {
    v8 s = {0};
#pragma GCC unroll 8
    for (i64 kh = 0; kh < KH; kh++)
#pragma GCC unroll 8
      for (i64 kw = 0; kw < KW; kw++) s += k[kh * KW + kw] * load_strided(top + kh * dh * Wp + ow * sw + kw * dw, sw);
    *(v8u *)(row + ow) = s;
  }
}

/* -O3 for the depthwise conv alone (the library is built at -O2 for its gcc time): at -O2 its per-plane loops
 * ran 2-3x slower on small planes (measured 14x14 and 7x7, 3x3 taps) */
#define DEPTHWISE_O3 __attribute__((optimize("O3")))

/* o[i] + bias + res[i], clamped to [lo, hi], over a row of n: the epilogue 8 lanes at a time */
DEPTHWISE_O3 static void finish_row(float *restrict o, i64 n, float bias, const float *res, float lo, float hi) {
  v8 vb = {0}, vlo = {0}, vhi = {0};
  vb += bias, vlo += lo, vhi += hi;
  i64 i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 v = *(v8u *)(o + i) + vb;
    if (res) v += *(const v8u *)(res + i);
    *(v8u *)(o + i) = clamp8(v, vlo, vhi);
  }
  for (; i < n; i++) {
    float v = o[i] + bias + (res ? res[i] : 0.0f);
    v = v < lo ? lo : v;
    o[i] = v > hi ? hi : v;
  }
}

/* a depthwise convolution (one input and one output channel per group): each plane copied into its padded
 * plane, then every output row computed in whole vectors and finished (bias, residual, clamp) into y */
DEPTHWISE_O3 static void depthwise(i64 N, i64 C, i64 H, i64 W, const i64 *geom, const float *x, const float *w,
                      const Epilogue *e, float *y) {
  i64 KH = geom[0], KW = geom[1], OH = geom[2], OW = geom[3], sh = geom[4], sw = geom[5], ph = geom[6],
      pw = geom[7], dh = geom[8], dw = geom[9];
  Padded pd = padded(H, W, geom);
#pragma omp parallel if (N * C * OH * OW * KH * KW > PAR_WORK)
  {
    float *pad = aligned_alloc(64, (size_t)((pd.Hp * pd.Wp + 16) * sizeof(float) + 63) / 64 * 64);
    float *row = aligned_alloc(64, (size_t)pd.Wq * sizeof(float));
#pragma omp for schedule(static)
    for (i64 nc = 0; nc < N * C; nc++) {
      const float *in = x + nc * H * W, *k = w + nc % C * KH * KW;
      float *out = y + nc * OH * OW;
      if (!pad || !row) continue;
      memset(pad, 0, (size_t)(pd.Hp * pd.Wp + 16) * sizeof(float));
      for (i64 ih = 0; ih < H; ih++) memcpy(pad + (ih + ph) * pd.Wp + pw, in + ih * W, (size_t)W * sizeof(float));
      for (i64 oh = 0; oh < OH; oh++) {
        const float *top = pad + oh * sh * pd.Wp;
        if (KH == 3 && KW == 3 && sw == 1)
          depthwise_vectors(top, k, pd.Wp, pd.Wq, 3, 3, 1, dh, dw, row);
        else if (KH == 3 && KW == 3 && sw == 2)
          depthwise_vectors(top, k, pd.Wp, pd.Wq, 3, 3, 2, dh, dw, row);
        else
          depthwise_vectors(top, k, pd.Wp, pd.Wq, KH, KW, sw, dh, dw, row);
        float *o = out + oh * OW;
        memcpy(o, row, (size_t)OW * sizeof(float));
        finish_row(o, OW, e->row_bias ? e->row_bias[nc % C] : 0.0f, e->res ? e->res + (nc * OH + oh) * OW : NULL,
                   e->lo, e->hi);
      }
    }
    free(pad);
    free(row);
  }
}

/* out = `groups` row-major [M x K] matrices of A laid out as the GEMM reads them (its depth blocks one after
 * another, each MR-row sliver of a block contiguous, rows zero-padded to a multiple of MR): a constant
 * weight packed once by the caller instead of at every call. out holds groups * ceil(M / MR) * MR * K floats */
void kiln_pack_a(i64 groups, i64 M, i64 K, const float *A, float *out) {
  i64 Mp = (M + MR - 1) / MR * MR;
  for (i64 g = 0; g < groups; g++) {
    Gemm gm = {M, 0, K, A + g * M * K, K, 1, NULL, 0, 0, NULL, 0, {NULL, NULL, NULL, 0, 0, 0}, NULL, NULL};
    for (i64 pc = 0; pc < K; pc += KC) {
      i64 kc = min64(KC, K - pc);
      for (i64 i = 0; i < M; i += MR) pack_a(&gm, i, min64(MR, M - i), pc, kc, out + g * Mp * K + pc * Mp + i * kc);
    }
  }
}

int kiln_tile_rows(void) { return MR; }

/* y[N, M, OH, OW] = clamp(conv2d(x[N, C, H, W], w[M, C/group, KH, KW]) + bias[M] + res[N, M, OH, OW], lo, hi)
 * (bias and res may be NULL): one GEMM per image and group, its B the image's im2col matrix read in place (a
 * 1x1 stride-1 unpadded conv's is the image itself). geom: KH, KW, OH, OW, sh, sw, ph (top), pw (left), dh, dw */
void kiln_conv2d(i64 N, i64 C, i64 H, i64 W, i64 M, i64 group, const i64 *geom, const float *x, const float *w,
                 const float *packed_w, const float *bias, const float *res, float lo, float hi, float *y) {
  i64 KH = geom[0], KW = geom[1], OH = geom[2], OW = geom[3], cg = C / group, mg = M / group, K = cg * KH * KW,
      P = OH * OW;
  Epilogue e = {bias, NULL, res, P, lo, hi};
  if (cg == 1 && mg == 1) return depthwise(N, C, H, W, geom, x, w, &e, y);
  int direct = KH == 1 && KW == 1 && geom[4] == 1 && geom[5] == 1 && geom[6] == 0 && geom[7] == 0 && OH == H &&
               OW == W;
  for (i64 n = 0; n < N; n++)
    for (i64 g = 0; g < group; g++) {
      const float *xg = x + (n * C + g * cg) * H * W;
      i64 at = (n * M + g * mg) * P;
      Image image = {xg, H, W, geom};
      Gemm gm = {mg, P, K, w + g * mg * K, K, 1, xg, P, 1, y + at, P,
                 {bias ? bias + g * mg : NULL, NULL, res ? res + at : NULL, P, lo, hi}, direct ? NULL : &image,
                 packed_w ? packed_w + g * ((mg + MR - 1) / MR * MR) * K : NULL};
      gemm_run(&gm);
    }
}

/* ---------------------------------------------------------------------------------------------------
 * pooling, normalization, elementwise */

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

/* y = x * scale[c] + shift[c] over x[N, C, size] (inference batch norm where no conv precedes it) */
void kiln_channel_affine(i64 N, i64 C, i64 size, const float *x, const float *scale, const float *shift, float *y) {
#pragma omp parallel for schedule(static) if (N * C * size > PAR_WORK)
  for (i64 nc = 0; nc < N * C; nc++) {
    float a = scale[nc % C], b = shift[nc % C];
    const float *in = x + nc * size;
    float *out = y + nc * size;
    for (i64 i = 0; i < size; i++) out[i] = in[i] * a + b;
  }
}

/* y = clamp(x, lo, hi): ReLU, ReLU6, Clip (NaN kept; lo > hi gives hi) */
void kiln_clamp(i64 n, const float *x, float lo, float hi, float *y) {
#pragma omp parallel for schedule(static) if (n > PAR_WORK)
  for (i64 i = 0; i < n; i++) {
    float v = x[i] < lo ? lo : x[i];
    y[i] = v > hi ? hi : v;
  }
}

/* y = a + b, same shapes */
void kiln_add(i64 n, const float *a, const float *b, float *y) {
#pragma omp parallel for schedule(static) if (n > PAR_WORK)
  for (i64 i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* y = erf(x) in float (within an ulp or two of the reference's double erf rounded; a third of its time) */
void kiln_erf(i64 n, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (n > PAR_WORK / 32)
  for (i64 i = 0; i < n; i++) y[i] = erff(x[i]);
}

/* softmax of each of x's `rows` rows of n elements (max subtracted first; sums in double) */
void kiln_softmax(i64 rows, i64 n, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (rows * n > PAR_WORK / 8)
  for (i64 r = 0; r < rows; r++) {
    const float *in = x + r * n;
    float *out = y + r * n, top = -INFINITY;
    for (i64 i = 0; i < n; i++) top = in[i] > top ? in[i] : top;
    double s = 0.0;
    for (i64 i = 0; i < n; i++) s += out[i] = expf(in[i] - top);
    float inv = (float)(1.0 / s);
    for (i64 i = 0; i < n; i++) out[i] *= inv;
  }
}

/* layer norm of each of x's `rows` rows of n elements: (x - mean) / sqrt(var + eps) * scale + shift
 * (shift may be NULL), statistics in double; mean[r] and inv[r] receive them */
void kiln_layer_norm(i64 rows, i64 n, const float *x, const float *scale, const float *shift, double eps, float *y,
                     float *mean, float *inv) {
#pragma omp parallel for schedule(static) if (rows * n > PAR_WORK / 4)
  for (i64 r = 0; r < rows; r++) {
    const float *in = x + r * n;
    float *out = y + r * n;
    double s = 0.0, q = 0.0;
    for (i64 i = 0; i < n; i++) s += in[i];
    double mu = s / (double)n;
    for (i64 i = 0; i < n; i++) q += (in[i] - mu) * (in[i] - mu);
    double iv = 1.0 / sqrt(q / (double)n + eps);
    for (i64 i = 0; i < n; i++) {
      float v = (float)((in[i] - mu) * iv) * scale[i];
      out[i] = shift ? v + shift[i] : v;
    }
    mean[r] = (float)mu, inv[r] = (float)iv;
  }
}

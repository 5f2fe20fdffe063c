/* kiln_top_k(x, k, values, indices; axis, largest, sorted): the k largest (or smallest) elements
 * along `axis`, always in sorted order, ties by lower index (tensor.top_k's reference). k is a
 * one-element int64 tensor; values/indices have extent k on `axis` (written back to their shapes).
 *
 * Rather than sorting every row: for k small against n, a heap of the k best so far that most
 * elements leave alone after one vectorized test of their block (O(n) on typical rows, O(n log k) at
 * worst); else a quicksort that skips the parts past k. Comparisons are inlined per dtype and
 * direction, with no comparator callback. */

/* numpy's ascending order (NaN after every number), as KILN_RT_LESS but without short-circuits,
 * so that a block's test vectorizes. */
#define KILN_TOPK_ASC(a, b) (((a) < (b)) | (((b) != (b)) & ((a) == (a))))
#define KILN_TOPK_DESC(a, b) KILN_TOPK_ASC(b, a)
#define KILN_TOPK_BLOCK 16 /* elements tested against the heap's root at once (a bit each) */
#define KILN_TOPK_HEAP_RATIO 16 /* the heap when n >= 16k; else a partial quicksort of the row */

/* Row selection for one dtype and direction: BEFORE(a, b) says value a ranks strictly before b.
 * Items are row indices; WORSE(i, j) says item i ranks after item j, equal values ranking the
 * higher index after: a strict total order, so any correct sort gives the one stable result. */
#define KILN_TOPK_ROW(S, VT, DIR, BEFORE)                                                            \
  static inline uint32_t kiln_topk_mask_##S##_##DIR(const VT* key, VT root) {                        \
    uint32_t m = 0;                                                                                  \
    _Pragma("GCC unroll 1") /* unrolled early, gcc 12 no longer vectorizes the reduction */          \
    for (int t = 0; t < KILN_TOPK_BLOCK; ++t) m |= (uint32_t)BEFORE(key[t], root) << t;              \
    return m;                                                                                        \
  }                                                                                                  \
  static inline int kiln_topk_worse_##S##_##DIR(const VT* key, int64_t i, int64_t j) {               \
    return BEFORE(key[j], key[i]) || (!BEFORE(key[i], key[j]) && i > j);                             \
  }                                                                                                  \
  /* Heaps have the worst item at the root. */                                                      \
  static inline void kiln_topk_sift_##S##_##DIR(const VT* key, int64_t* h, int64_t m, int64_t i) {   \
    int64_t x = h[i];                                                                                \
    for (int64_t c = 2 * i + 1; c < m; i = c, c = 2 * i + 1) {                                       \
      if (c + 1 < m && kiln_topk_worse_##S##_##DIR(key, h[c + 1], h[c])) ++c;                        \
      if (!kiln_topk_worse_##S##_##DIR(key, h[c], x)) break;                                         \
      h[i] = h[c];                                                                                   \
    }                                                                                                \
    h[i] = x;                                                                                        \
  }                                                                                                  \
  static void kiln_topk_heapify_##S##_##DIR(const VT* key, int64_t* h, int64_t m) {                 \
    for (int64_t i = m / 2; i-- > 0;) kiln_topk_sift_##S##_##DIR(key, h, m, i);                      \
  }                                                                                                  \
  /* A heap's items sorted best first: the worst moves to the back. */                               \
  static void kiln_topk_unheap_##S##_##DIR(const VT* key, int64_t* h, int64_t m) {                  \
    for (; m > 1; --m) {                                                                             \
      int64_t t = h[0]; h[0] = h[m - 1]; h[m - 1] = t;                                               \
      kiln_topk_sift_##S##_##DIR(key, h, m - 1, 0);                                                  \
    }                                                                                                \
  }                                                                                                  \
  /* h[0..k) = the k best of all n items, best first, for k << n. Items come in index order, so     \
   * one that ties with the root loses; most are rejected a block at a time. */                     \
  static void kiln_topk_select_##S##_##DIR(const VT* key, int64_t n, int64_t k, int64_t* h) {       \
    for (int64_t i = 0; i < k; ++i) h[i] = i;                                                        \
    kiln_topk_heapify_##S##_##DIR(key, h, k);                                                        \
    int64_t j = k;                                                                                   \
    for (; j + KILN_TOPK_BLOCK <= n; j += KILN_TOPK_BLOCK)                                           \
      for (uint32_t m = kiln_topk_mask_##S##_##DIR(key + j, key[h[0]]); m; m &= m - 1) {             \
        const int64_t i = j + __builtin_ctz(m);                                                      \
        if (BEFORE(key[i], key[h[0]])) { h[0] = i; kiln_topk_sift_##S##_##DIR(key, h, k, 0); }      \
      }                                                                                              \
    for (; j < n; ++j)                                                                               \
      if (BEFORE(key[j], key[h[0]])) { h[0] = j; kiln_topk_sift_##S##_##DIR(key, h, k, 0); }        \
    kiln_topk_unheap_##S##_##DIR(key, h, k);                                                         \
  }                                                                                                  \
  static inline void kiln_topk_order_##S##_##DIR(const VT* key, int64_t* a, int64_t* b) {          \
    if (kiln_topk_worse_##S##_##DIR(key, *a, *b)) { int64_t t = *a; *a = *b; *b = t; }               \
  }                                                                                                  \
  /* Sorts h[lo..hi) far enough that its first k - lo items are its best, in order: quicksort       \
   * (median of three) that leaves alone the parts past k, heap sort below a depth budget. */        \
  static void kiln_topk_psort_##S##_##DIR(const VT* key, int64_t* h, int64_t lo, int64_t hi,       \
                                          int64_t k, int depth) {                                    \
    while (hi - lo > 16) {                                                                           \
      if (depth-- == 0) {                                                                            \
        kiln_topk_heapify_##S##_##DIR(key, h + lo, hi - lo);                                         \
        kiln_topk_unheap_##S##_##DIR(key, h + lo, hi - lo);                                          \
        return;                                                                                      \
      }                                                                                              \
      int64_t mid = lo + (hi - lo) / 2, t;                                                           \
      kiln_topk_order_##S##_##DIR(key, &h[lo], &h[mid]); /* median of three: h[lo], h[mid], h[hi - 1] */ \
      kiln_topk_order_##S##_##DIR(key, &h[mid], &h[hi - 1]);                                         \
      kiln_topk_order_##S##_##DIR(key, &h[lo], &h[mid]);                                             \
      t = h[mid]; h[mid] = h[lo + 1]; h[lo + 1] = t;                                                 \
      const int64_t p = h[lo + 1];                                                                   \
      int64_t i = lo + 1, j = hi - 1;                                                                \
      for (;;) { /* sentinels: h[lo] ranks before p, h[hi - 1] after */                               \
        do ++i; while (kiln_topk_worse_##S##_##DIR(key, p, h[i]));                                   \
        do --j; while (kiln_topk_worse_##S##_##DIR(key, h[j], p));                                   \
        if (i >= j) break;                                                                           \
        t = h[i]; h[i] = h[j]; h[j] = t;                                                             \
      }                                                                                              \
      h[lo + 1] = h[j]; h[j] = p;                                                                    \
      kiln_topk_psort_##S##_##DIR(key, h, lo, j, k, depth);                                          \
      if (j + 1 >= k) return;                                                                        \
      lo = j + 1;                                                                                    \
    }                                                                                                \
    for (int64_t i = lo + 1; i < hi; ++i) { /* insertion sort */                                     \
      int64_t x = h[i], j = i;                                                                       \
      for (; j > lo && kiln_topk_worse_##S##_##DIR(key, h[j - 1], x); --j) h[j] = h[j - 1];          \
      h[j] = x;                                                                                      \
    }                                                                                                \
  }                                                                                                  \
  /* h[0..k) = the indices of the k best of key[0..n), best first; 0 < k <= n; h holds n. */        \
  static void kiln_topk_row_##S##_##DIR(const VT* key, int64_t n, int64_t k, int64_t* h) {          \
    if (n >= KILN_TOPK_HEAP_RATIO * k) {                                                             \
      kiln_topk_select_##S##_##DIR(key, n, k, h);                                                    \
      return;                                                                                        \
    }                                                                                                \
    for (int64_t i = 0; i < n; ++i) h[i] = i;                                                        \
    kiln_topk_psort_##S##_##DIR(key, h, 0, n, k, 2 * (64 - __builtin_clzll((uint64_t)n)));          \
  }

/* The rows (outer x inner, each n long at stride inner) split over threads; a row is read into a
 * contiguous key buffer unless it already is one. Returns 0 when a scratch allocation failed. */
#define KILN_TOPK_IMPL(S, CODE, ST, VT, LOAD)                                                        \
  KILN_TOPK_ROW(S, VT, asc, KILN_TOPK_ASC)                                                           \
  KILN_TOPK_ROW(S, VT, desc, KILN_TOPK_DESC)                                                         \
  static int kiln_top_k_##S(const ST* x, ST* vals, int64_t* inds, int64_t outer, int64_t n,         \
                            int64_t inner, int64_t k, int desc) {                                    \
    const int64_t rows = outer * inner;                                                              \
    int ok = 1;                                                                                      \
    _Pragma("omp parallel if (rows > 1 && rows * n >= 16384)") {                                      \
      VT* buf = (VT*)malloc((size_t)n * sizeof(VT));                                                 \
      int64_t* h = (int64_t*)malloc((size_t)n * sizeof(int64_t));                                    \
      if (!buf || !h) __atomic_store_n(&ok, 0, __ATOMIC_RELAXED);                                    \
      _Pragma("omp for schedule(static)")                                                            \
      for (int64_t r = 0; r < rows; ++r) {                                                           \
        if (!buf || !h) continue;                                                                    \
        const int64_t o = r / inner, in = r % inner;                                                 \
        const ST* row = x + o * n * inner + in;                                                      \
        const VT* key = (const VT*)row;                                                              \
        if (inner != 1 || sizeof(ST) != sizeof(VT)) {                                                \
          for (int64_t j = 0; j < n; ++j) buf[j] = LOAD(row[j * inner]);                             \
          key = buf;                                                                                 \
        }                                                                                            \
        if (desc) kiln_topk_row_##S##_desc(key, n, k, h);                                            \
        else kiln_topk_row_##S##_asc(key, n, k, h);                                                  \
        for (int64_t t = 0; t < k; ++t) {                                                            \
          const int64_t at = (o * k + t) * inner + in;                                               \
          vals[at] = row[h[t] * inner];                                                              \
          inds[at] = h[t];                                                                           \
        }                                                                                            \
      }                                                                                              \
      free(buf);                                                                                     \
      free(h);                                                                                       \
    }                                                                                                \
    return ok;                                                                                       \
  }
KILN_RT_DTYPES(KILN_TOPK_IMPL)

static int32_t kiln_top_k(const kiln_tensor_t* x, const kiln_tensor_t* k, kiln_tensor_t* values,
                          kiln_tensor_t* indices, int64_t axis, int64_t largest, int64_t sorted) {
  (void)sorted; /* the reference always returns sorted order */
  int64_t outer, n, inner;
  if (axis < 0 || axis >= x->ndim || kiln_rt_numel(k) < 1) return KILN_ERR_BAD_ARG;
  kiln_rt_split(x, axis, &outer, &n, &inner);
  int64_t kk = ((const int64_t*)k->data)[0];
  if (kk < 0 || kk > n || kk > values->shape[axis]) return KILN_ERR_BAD_ARG;
  values->shape[axis] = indices->shape[axis] = kk;
  if (kk == 0 || outer * inner == 0) return KILN_OK;
  switch (x->dtype) {
#define KILN_TOPK_CASE(S, CODE, ST, VT, LOAD)                                                        \
    case CODE: return kiln_top_k_##S((const ST*)x->data, (ST*)values->data, (int64_t*)indices->data, outer, n, \
                                     inner, kk, (int)largest) ? KILN_OK : KILN_ERR_ALLOC;
    KILN_RT_DTYPES(KILN_TOPK_CASE)
#undef KILN_TOPK_CASE
    default: return KILN_ERR_BAD_ARG;
  }
}

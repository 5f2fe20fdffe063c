/* A stable argsort: merge sort of item ids under a comparator (<0: a goes first), so items that
 * compare equal keep their order. */
typedef int (*kiln_cmp_fn)(const void* ctx, int64_t a, int64_t b);

/* Sorts idx[0..n) in place; `tmp` holds n scratch ids. */
static void kiln_argsort_with(int64_t* idx, int64_t* tmp, int64_t n, kiln_cmp_fn cmp, const void* ctx) {
  int64_t *src = idx, *dst = tmp;
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = cmp(ctx, src[j], src[i]) < 0 ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    int64_t* t = src; src = dst; dst = t;
  }
  if (src != idx) memcpy(idx, src, (size_t)n * sizeof(int64_t));
}

/* idx = the stable sorting permutation of items 0..n-1. */
static int32_t kiln_argsort(int64_t* idx, int64_t n, kiln_cmp_fn cmp, const void* ctx) {
  int64_t* tmp = (int64_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
  if (tmp == NULL) return KILN_ERR_ALLOC;
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  kiln_argsort_with(idx, tmp, n, cmp, ctx);
  free(tmp);
  return KILN_OK;
}

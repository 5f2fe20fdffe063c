/* kiln_top_k(x, k, values, indices; axis, largest, sorted): the k largest (or smallest) elements
 * along `axis`, always in sorted order, ties by lower index (tensor.top_k's reference). k is a
 * one-element int64 tensor; values/indices have extent k on `axis` (written back to their shapes). */
typedef struct { const void* keys; int desc; } kiln_topk_ctx;

#define KILN_TOPK_IMPL(S, CODE, ST, VT, LOAD)                                                        \
  static int kiln_topk_cmp_##S(const void* c, int64_t a, int64_t b) {                               \
    const kiln_topk_ctx* t = (const kiln_topk_ctx*)c;                                               \
    const VT* v = (const VT*)t->keys;                                                               \
    return t->desc ? KILN_RT_CMP(v[b], v[a]) : KILN_RT_CMP(v[a], v[b]);                             \
  }                                                                                                 \
  static void kiln_top_k_##S(const ST* x, ST* vals, int64_t* inds, int64_t outer, int64_t n,       \
                             int64_t inner, int64_t k, int desc, void* keys, int64_t* idx, int64_t* tmp) { \
    kiln_topk_ctx ctx = {keys, desc};                                                               \
    VT* key = (VT*)keys;                                                                            \
    for (int64_t o = 0; o < outer; ++o)                                                             \
      for (int64_t in = 0; in < inner; ++in) {                                                      \
        const ST* row = x + o * n * inner + in;                                                     \
        for (int64_t j = 0; j < n; ++j) { key[j] = LOAD(row[j * inner]); idx[j] = j; }              \
        kiln_argsort_with(idx, tmp, n, kiln_topk_cmp_##S, &ctx);                                    \
        for (int64_t t = 0; t < k; ++t) {                                                           \
          int64_t at = (o * k + t) * inner + in;                                                    \
          vals[at] = row[idx[t] * inner];                                                           \
          inds[at] = idx[t];                                                                        \
        }                                                                                           \
      }                                                                                             \
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
  size_t m = (size_t)(n > 0 ? n : 1);
  void* keys = malloc(m * sizeof(double));
  int64_t* idx = (int64_t*)malloc(2 * m * sizeof(int64_t));
  int32_t rc = keys && idx ? KILN_OK : KILN_ERR_ALLOC;
  if (rc == KILN_OK) {
    switch (x->dtype) {
#define KILN_TOPK_CASE(S, CODE, ST, VT, LOAD)                                                        \
      case CODE: kiln_top_k_##S((const ST*)x->data, (ST*)values->data, (int64_t*)indices->data, outer, n, \
                                inner, kk, (int)largest, keys, idx, idx + m); break;
      KILN_RT_DTYPES(KILN_TOPK_CASE)
#undef KILN_TOPK_CASE
      default: rc = KILN_ERR_BAD_ARG;
    }
  }
  free(keys);
  free(idx);
  return rc;
}

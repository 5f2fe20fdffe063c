/* kiln_unique(x, y, first, inverse, counts; axis, has_axis, sorted): the distinct elements of x
 * (flattened), or its distinct slices along `axis`, ascending (slices compared row-major) or in
 * first-seen order, with the index of each one's first occurrence, every element's (slice's)
 * position in y, and counts. The number of distinct values U is data-dependent: y (extent U on
 * `axis`, or on its only axis), first and counts arrive with capacity n (numel, or the extent of
 * `axis`) and U is written back to their shapes. */
typedef struct { const void* x; int64_t outer, n, inner; } kiln_unique_ctx;

#define KILN_UNIQUE_IMPL(S, CODE, ST, VT, LOAD)                                                      \
  static int kiln_unique_cmp_##S(const void* c, int64_t a, int64_t b) {                             \
    const kiln_unique_ctx* t = (const kiln_unique_ctx*)c;                                           \
    const ST* x = (const ST*)t->x;                                                                  \
    for (int64_t o = 0; o < t->outer; ++o)                                                          \
      for (int64_t in = 0; in < t->inner; ++in) {                                                   \
        VT va = LOAD(x[(o * t->n + a) * t->inner + in]), vb = LOAD(x[(o * t->n + b) * t->inner + in]); \
        int r = KILN_RT_CMP(va, vb);                                                                \
        if (r) return r;                                                                            \
      }                                                                                             \
    return 0;                                                                                       \
  }
KILN_RT_DTYPES(KILN_UNIQUE_IMPL)

static int kiln_unique_by_first(const void* c, int64_t a, int64_t b) {
  const int64_t* first = (const int64_t*)c;
  return first[a] < first[b] ? -1 : first[a] > first[b];
}

static int32_t kiln_unique(const kiln_tensor_t* x, kiln_tensor_t* y, kiln_tensor_t* first, kiln_tensor_t* inverse,
                           kiln_tensor_t* counts, int64_t axis, int64_t has_axis, int64_t sorted) {
  kiln_unique_ctx ctx = {x->data, 1, kiln_rt_numel(x), 1};
  if (has_axis) {
    if (axis < 0 || axis >= x->ndim) return KILN_ERR_BAD_ARG;
    kiln_rt_split(x, axis, &ctx.outer, &ctx.n, &ctx.inner);
  }
  kiln_cmp_fn cmp = NULL;
  size_t esize = 0;
  switch (x->dtype) {
#define KILN_UNIQUE_CASE(S, CODE, ST, VT, LOAD) case CODE: cmp = kiln_unique_cmp_##S; esize = sizeof(ST); break;
    KILN_RT_DTYPES(KILN_UNIQUE_CASE)
#undef KILN_UNIQUE_CASE
    default: return KILN_ERR_BAD_ARG;
  }
  int64_t n = ctx.n, m = n > 0 ? n : 1;
  int64_t* buf = (int64_t*)malloc((size_t)m * 5 * sizeof(int64_t));
  if (buf == NULL) return KILN_ERR_ALLOC;
  /* order: sorted item ids; gfirst/gcount: per group (sorted order); group: item -> group; pos: group -> output */
  int64_t *order = buf, *gfirst = buf + m, *gcount = buf + 2 * m, *group = buf + 3 * m, *perm = buf + 4 * m;
  int32_t rc = kiln_argsort(order, n, cmp, &ctx);
  int64_t u = 0;
  for (int64_t j = 0; rc == KILN_OK && j < n; ++j) {
    if (j == 0 || cmp(&ctx, order[j - 1], order[j]) != 0) { gfirst[u] = order[j]; gcount[u] = 0; ++u; }
    gcount[u - 1] += 1;
    group[order[j]] = u - 1;
  }
  if (rc == KILN_OK && !sorted) {
    rc = kiln_argsort(perm, u, kiln_unique_by_first, gfirst);
  } else {
    for (int64_t g = 0; g < u; ++g) perm[g] = g;
  }
  int64_t* yshape = has_axis ? &y->shape[axis] : &y->shape[0];
  if (rc == KILN_OK && (u > *yshape || u > first->shape[0] || u > counts->shape[0])) rc = KILN_ERR_BAD_ARG;
  if (rc == KILN_OK) {
    *yshape = first->shape[0] = counts->shape[0] = u;
    int64_t *fo = (int64_t*)first->data, *co = (int64_t*)counts->data, *io = (int64_t*)inverse->data;
    int64_t* newpos = order; /* order is no longer needed */
    char* yo = (char*)y->data;
    const char* xs = (const char*)x->data;
    size_t row = (size_t)ctx.inner * esize;
    for (int64_t r = 0; r < u; ++r) {
      int64_t g = perm[r];
      newpos[g] = r;
      fo[r] = gfirst[g];
      co[r] = gcount[g];
      for (int64_t o = 0; o < ctx.outer; ++o)
        memcpy(yo + (size_t)(o * u + r) * row, xs + (size_t)(o * n + gfirst[g]) * row, row);
    }
    for (int64_t i = 0; i < n; ++i) io[i] = newpos[group[i]];
  }
  free(buf);
  return rc;
}

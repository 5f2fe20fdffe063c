/* kiln_non_zero(x, out): out is [ndim, count] int64, the coordinates of x's non-zero elements in
 * row-major order (NaN counts as non-zero). count is data-dependent: capacity numel(x). */
#define KILN_NZ_IMPL(S, CODE, ST, VT, LOAD)                                                          \
  static int64_t kiln_nz_count_##S(const ST* x, int64_t n) {                                        \
    int64_t c = 0;                                                                                  \
    for (int64_t i = 0; i < n; ++i) c += LOAD(x[i]) != 0;                                           \
    return c;                                                                                       \
  }                                                                                                 \
  static void kiln_nz_write_##S(const ST* x, const int64_t* shape, int32_t ndim, int64_t n, int64_t c, \
                                int64_t* out) {                                                     \
    int64_t col = 0;                                                                                \
    for (int64_t i = 0; i < n; ++i) {                                                               \
      if (!(LOAD(x[i]) != 0)) continue;                                                             \
      int64_t r = i;                                                                                \
      for (int32_t d = ndim - 1; d >= 0; --d) { out[d * c + col] = r % shape[d]; r /= shape[d]; }   \
      ++col;                                                                                        \
    }                                                                                               \
  }
KILN_RT_DTYPES(KILN_NZ_IMPL)

static int32_t kiln_non_zero(const kiln_tensor_t* x, kiln_tensor_t* out) {
  int64_t n = kiln_rt_numel(x), c = -1;
  switch (x->dtype) {
#define KILN_NZ_CASE(S, CODE, ST, VT, LOAD)                                                          \
    case CODE: c = kiln_nz_count_##S((const ST*)x->data, n); break;
    KILN_RT_DTYPES(KILN_NZ_CASE)
    default: return KILN_ERR_BAD_ARG;
  }
  if (c > out->shape[1]) return KILN_ERR_BAD_ARG;
  out->shape[1] = c;
  switch (x->dtype) {
#define KILN_NZW_CASE(S, CODE, ST, VT, LOAD)                                                         \
    case CODE: kiln_nz_write_##S((const ST*)x->data, x->shape, x->ndim, n, c, (int64_t*)out->data); break;
    KILN_RT_DTYPES(KILN_NZW_CASE)
#undef KILN_NZ_CASE
#undef KILN_NZW_CASE
  }
  return KILN_OK;
}

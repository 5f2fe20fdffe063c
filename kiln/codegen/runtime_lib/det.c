/* kiln_det(x, y): y[...] = det(x[..., M, M]) by LU factorization with partial pivoting (the first row of
 * largest magnitude, as LAPACK's getrf) in double; a zero pivot makes the determinant 0. */
static double kiln_det_load(const kiln_tensor_t* t, int64_t i) {
  switch (t->dtype) {
    case KILN_DT_FLOAT16: return kiln_f16_to_f32(((const uint16_t*)t->data)[i]);
    case KILN_DT_BFLOAT16: return kiln_bf16_to_f32(((const uint16_t*)t->data)[i]);
    case KILN_DT_FLOAT32: return ((const float*)t->data)[i];
    default: return ((const double*)t->data)[i];
  }
}

static void kiln_det_store(kiln_tensor_t* t, int64_t i, double v) {
  switch (t->dtype) {
    case KILN_DT_FLOAT16: ((uint16_t*)t->data)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_DT_BFLOAT16: ((uint16_t*)t->data)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_DT_FLOAT32: ((float*)t->data)[i] = (float)v; break;
    default: ((double*)t->data)[i] = v;
  }
}

static double kiln_det_lu(double* a, int64_t m) {
  double det = 1.0;
  for (int64_t k = 0; k < m; ++k) {
    int64_t p = k;
    for (int64_t r = k + 1; r < m; ++r)
      if (fabs(a[r * m + k]) > fabs(a[p * m + k])) p = r;
    if (a[p * m + k] == 0.0) return 0.0;
    if (p != k) {
      for (int64_t j = 0; j < m; ++j) { double t = a[k * m + j]; a[k * m + j] = a[p * m + j]; a[p * m + j] = t; }
      det = -det;
    }
    double piv = a[k * m + k];
    det *= piv;
    for (int64_t r = k + 1; r < m; ++r) {
      double f = a[r * m + k] / piv;
      for (int64_t j = k + 1; j < m; ++j) a[r * m + j] -= f * a[k * m + j];
    }
  }
  return det;
}

static int32_t kiln_det(const kiln_tensor_t* x, kiln_tensor_t* y) {
  int32_t d = x->ndim;
  if (d < 2 || x->shape[d - 1] != x->shape[d - 2]) return KILN_ERR_BAD_ARG;
  int64_t m = x->shape[d - 1], count = kiln_rt_numel(y);
  double* a = (double*)malloc((size_t)(m * m > 0 ? m * m : 1) * sizeof(double));
  if (!a) return KILN_ERR_ALLOC;
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[i] = kiln_det_load(x, b * m * m + i);
    kiln_det_store(y, b, kiln_det_lu(a, m));
  }
  free(a);
  return KILN_OK;
}

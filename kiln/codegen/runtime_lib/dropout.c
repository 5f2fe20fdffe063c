/* kiln_dropout(x, ratio, training, y, mask; seed): training-mode dropout drawing exactly the reference's
 * numbers: numpy's legacy RandomState(seed) (MT19937 seeded by init_genrand), one 53-bit uniform double
 * per element in C order, kept where u >= ratio; kept values are scaled by 1 / (1 - ratio) in x's dtype.
 * Not training, or ratio 0: y = x and an all-true mask, no numbers drawn. */
typedef struct { uint32_t key[624]; int pos; } kiln_mt19937;

static void kiln_mt_seed(kiln_mt19937* s, uint32_t seed) {
  for (int i = 0; i < 624; ++i) {
    s->key[i] = seed;
    seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)(i + 1);
  }
  s->pos = 624;
}

static uint32_t kiln_mt_next(kiln_mt19937* s) {
  if (s->pos == 624) {
    for (int i = 0; i < 624; ++i) {
      uint32_t y = (s->key[i] & 0x80000000u) | (s->key[(i + 1) % 624] & 0x7fffffffu);
      s->key[i] = s->key[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    s->pos = 0;
  }
  uint32_t y = s->key[s->pos++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

static double kiln_mt_double(kiln_mt19937* s) {
  int32_t a = (int32_t)(kiln_mt_next(s) >> 5), b = (int32_t)(kiln_mt_next(s) >> 6);
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

static double kiln_dropout_load(const kiln_tensor_t* t, int64_t i) {
  switch (t->dtype) {
    case KILN_DT_FLOAT16: return kiln_f16_to_f32(((const uint16_t*)t->data)[i]);
    case KILN_DT_BFLOAT16: return kiln_bf16_to_f32(((const uint16_t*)t->data)[i]);
    case KILN_DT_FLOAT32: return ((const float*)t->data)[i];
    case KILN_DT_FLOAT64: return ((const double*)t->data)[i];
    case KILN_DT_BOOL: return ((const uint8_t*)t->data)[i] != 0;
    default: return 0.0;
  }
}

/* y[i] = x[i] * scale (keep) or 0, rounded as numpy does it: in x's dtype, the scale rounded to it first
 * (float16 under NEP 50), except bfloat16 whose product ml_dtypes forms in float32. */
static void kiln_dropout_store(const kiln_tensor_t* x, kiln_tensor_t* y, int64_t i, int keep, double scale) {
  switch (x->dtype) {
    case KILN_DT_FLOAT16: {
      float s = kiln_f16_to_f32(kiln_f32_to_f16((float)scale));
      ((uint16_t*)y->data)[i] = keep ? kiln_f32_to_f16(kiln_f16_to_f32(((const uint16_t*)x->data)[i]) * s) : 0;
      break;
    }
    case KILN_DT_BFLOAT16: /* ml_dtypes: bfloat16 * Python float is a float32 product */
      ((uint16_t*)y->data)[i] = keep ? kiln_f32_to_bf16(kiln_bf16_to_f32(((const uint16_t*)x->data)[i]) * (float)scale) : 0;
      break;
    case KILN_DT_FLOAT32: ((float*)y->data)[i] = keep ? ((const float*)x->data)[i] * (float)scale : 0.0f; break;
    default: ((double*)y->data)[i] = keep ? ((const double*)x->data)[i] * scale : 0.0;
  }
}

static int32_t kiln_dropout(const kiln_tensor_t* x, const kiln_tensor_t* ratio, const kiln_tensor_t* training,
                            kiln_tensor_t* y, kiln_tensor_t* mask, int64_t seed) {
  if (kiln_rt_numel(ratio) < 1 || kiln_rt_numel(training) < 1 || seed < 0 || seed > 0xffffffffLL)
    return KILN_ERR_BAD_ARG;
  int64_t n = kiln_rt_numel(x);
  double r = kiln_dropout_load(ratio, 0);
  uint8_t* m = (uint8_t*)mask->data;
  if (kiln_dropout_load(training, 0) == 0.0 || r == 0.0) {
    for (int64_t i = 0; i < n; ++i) { kiln_dropout_store(x, y, i, 1, 1.0); m[i] = 1; }
    return KILN_OK;
  }
  kiln_mt19937 s;
  kiln_mt_seed(&s, (uint32_t)seed);
  double scale = r >= 1.0 ? 0.0 : 1.0 / (1.0 - r);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = kiln_mt_double(&s) >= r;
    kiln_dropout_store(x, y, i, m[i] && r < 1.0, scale);
  }
  return KILN_OK;
}

/* Kiln runtime library: operators that are not loop nests. Pasted (with the function files a
 * module uses) after kiln_runtime.h, so everything is static and needs only that header.
 *
 * Every tensor crosses as a kiln_tensor_t. A runtime function returns KILN_OK or an error code.
 * An output with a data-dependent extent arrives allocated with its capacity (an upper bound);
 * the function writes the output dense in its actual shape at the start of the buffer and
 * stores the actual extents into the output's `shape`. */
typedef struct {
  void* data;
  int64_t* shape;
  int32_t ndim;
  int32_t dtype;
} kiln_tensor_t;

#define KILN_ERR_BAD_ARG (-3)

enum {
  KILN_DT_BOOL, KILN_DT_INT8, KILN_DT_INT16, KILN_DT_INT32, KILN_DT_INT64, KILN_DT_UINT8, KILN_DT_UINT16,
  KILN_DT_UINT32, KILN_DT_UINT64, KILN_DT_FLOAT16, KILN_DT_BFLOAT16, KILN_DT_FLOAT32, KILN_DT_FLOAT64
};

/* X(suffix, dtype code, storage type, value type, load): every dtype the runtime handles. Values
 * are compared as the value type; float16/bfloat16 are stored as uint16_t and compared as float. */
#define KILN_RT_ID(v) (v)
#define KILN_RT_DTYPES(X)                                                                        \
  X(b8, KILN_DT_BOOL, uint8_t, uint8_t, KILN_RT_ID) X(i8, KILN_DT_INT8, int8_t, int8_t, KILN_RT_ID)       \
  X(i16, KILN_DT_INT16, int16_t, int16_t, KILN_RT_ID) X(i32, KILN_DT_INT32, int32_t, int32_t, KILN_RT_ID) \
  X(i64, KILN_DT_INT64, int64_t, int64_t, KILN_RT_ID) X(u8, KILN_DT_UINT8, uint8_t, uint8_t, KILN_RT_ID)   \
  X(u16, KILN_DT_UINT16, uint16_t, uint16_t, KILN_RT_ID)                                              \
  X(u32, KILN_DT_UINT32, uint32_t, uint32_t, KILN_RT_ID)                                              \
  X(u64, KILN_DT_UINT64, uint64_t, uint64_t, KILN_RT_ID)                                              \
  X(f16, KILN_DT_FLOAT16, uint16_t, float, kiln_f16_to_f32)                                           \
  X(bf16, KILN_DT_BFLOAT16, uint16_t, float, kiln_bf16_to_f32)                                        \
  X(f32, KILN_DT_FLOAT32, float, float, KILN_RT_ID) X(f64, KILN_DT_FLOAT64, double, double, KILN_RT_ID)

/* numpy's sort order: NaN after every number; NaNs equal each other. */
#define KILN_RT_LESS(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define KILN_RT_CMP(a, b) (KILN_RT_LESS(a, b) ? -1 : KILN_RT_LESS(b, a) ? 1 : 0)

static inline int64_t kiln_rt_numel(const kiln_tensor_t* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* (outer, n, inner) of viewing t as [outer, t.shape[axis], inner]. */
static inline void kiln_rt_split(const kiln_tensor_t* t, int64_t axis, int64_t* outer, int64_t* n, int64_t* inner) {
  *outer = *inner = 1;
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (i < axis) *outer *= t->shape[i];
    if (i > axis) *inner *= t->shape[i];
  }
  *n = t->shape[axis];
}

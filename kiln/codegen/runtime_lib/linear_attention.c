/* kiln_linear_attention(q, k, v, past, decay, beta, y, state; hq, hkv, has_decay, has_beta, scale_bits):
 * nn.linear_attention's recurrence (kiln/op/rnn.py) over float32 tensors: a serial loop over time per
 * (batch, kv head), the (d_k, d_v) state kept in `state` itself. q (B, T, hq*dk), k (B, T, hkv*dk),
 * v (B, T, hkv*dv), past (B, hkv, dk, dv); decay (B, T, hkv or hkv*dk) holds log-decays (gated rules),
 * beta (B, T, hkv or 1) the delta-rule rates; an absent one is flagged by has_decay/has_beta. Per step:
 *   S *= exp(g) per key row;  u = has_beta ? beta * (v - S^T k) : v;  S += k u^T;  y = scale * q S
 * with each of the hq / hkv query heads of a group reading its kv head's state. scale_bits are the
 * bits of a double. */
static int32_t kiln_linear_attention(const kiln_tensor_t* q, const kiln_tensor_t* k, const kiln_tensor_t* v,
                                     const kiln_tensor_t* past, const kiln_tensor_t* decay,
                                     const kiln_tensor_t* beta, kiln_tensor_t* y, kiln_tensor_t* state,
                                     int64_t hq, int64_t hkv, int64_t has_decay, int64_t has_beta,
                                     int64_t scale_bits) {
  if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || state->ndim != 4 || hq <= 0 || hkv <= 0 || hq % hkv)
    return KILN_ERR_BAD_ARG;
  const int64_t nb = q->shape[0], nt = q->shape[1], dk = q->shape[2] / hq, dv = v->shape[2] / hkv;
  const int64_t group = hq / hkv;
  const int64_t gw = has_decay ? decay->shape[2] : 0, bw = has_beta ? beta->shape[2] : 0;
  const int64_t g_per_key = gw == hkv * dk;  /* else one decay per head, shared by its key rows */
  double scale;
  memcpy(&scale, &scale_bits, sizeof scale);
  const float *Q = (const float*)q->data, *K = (const float*)k->data, *V = (const float*)v->data;
  const float *G = has_decay ? (const float*)decay->data : NULL, *Bt = has_beta ? (const float*)beta->data : NULL;
  float *Y = (float*)y->data, *S = (float*)state->data;
  memcpy(S, past->data, (size_t)(nb * hkv * dk * dv) * sizeof(float));
  int32_t rc = KILN_OK;
#pragma omp parallel for collapse(2) schedule(static) if (nb * hkv > 1 && nt * dk * dv > 4096)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < hkv; ++h) {
      float* s = S + (b * hkv + h) * dk * dv;
      float* u = (float*)malloc((size_t)(dv > 0 ? dv : 1) * sizeof(float));
      if (!u) {
        __atomic_store_n(&rc, KILN_ERR_ALLOC, __ATOMIC_RELAXED);
        continue;
      }
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t row = b * nt + t;
        const float* kt = K + row * hkv * dk + h * dk;
        const float* vt = V + row * hkv * dv + h * dv;
        if (G)
          for (int64_t d = 0; d < dk; ++d) {
            const float f = expf(G[row * gw + (g_per_key ? h * dk + d : h)]);
            for (int64_t m = 0; m < dv; ++m) s[d * dv + m] *= f;
          }
        if (Bt) {
          const float rate = Bt[row * bw + (bw == 1 ? 0 : h)];
          for (int64_t m = 0; m < dv; ++m) u[m] = 0.0f;
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) u[m] += s[d * dv + m] * kt[d];
          for (int64_t m = 0; m < dv; ++m) u[m] = rate * (vt[m] - u[m]);
        } else {
          for (int64_t m = 0; m < dv; ++m) u[m] = vt[m];
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m) s[d * dv + m] += kt[d] * u[m];
        for (int64_t j = 0; j < group; ++j) {
          const int64_t qh = h * group + j;
          const float* qt = Q + row * hq * dk + qh * dk;
          float* yt = Y + row * hq * dv + qh * dv;
          for (int64_t m = 0; m < dv; ++m) yt[m] = 0.0f;
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) yt[m] += qt[d] * s[d * dv + m];
          for (int64_t m = 0; m < dv; ++m) yt[m] = (float)(scale * (double)yt[m]);
        }
      }
      free(u);
    }
  return rc;
}

/* kiln_non_max_suppression(boxes, scores, max_output, iou_threshold, score_threshold, out;
 * center_point_box): per batch and class, greedily keep the best-scoring boxes (ties: lower
 * index) whose IoU with every kept box is <= iou_threshold, at most max_output of them. Omitted
 * optional inputs arrive empty. out is [S, 3] int64 rows (batch, class, box); S is data-dependent:
 * capacity batches * classes * boxes. Geometry in double, as the reference. */
typedef struct { const float* s; } kiln_nms_ctx;

static int kiln_nms_cmp(const void* c, int64_t a, int64_t b) {
  const float* s = ((const kiln_nms_ctx*)c)->s;
  float x = s[a], y = s[b]; /* descending; NaN scores last */
  if (x != x || y != y) return (x != x) - (y != y);
  return x > y ? -1 : x < y;
}

static void kiln_nms_corners(const float* b, int center, double* c) {
  if (center) {
    double xc = b[0], yc = b[1], w = b[2], h = b[3];
    c[0] = yc - h / 2; c[1] = xc - w / 2; c[2] = yc + h / 2; c[3] = xc + w / 2;
  } else {
    double y1 = b[0], x1 = b[1], y2 = b[2], x2 = b[3];
    c[0] = y1 < y2 ? y1 : y2; c[1] = x1 < x2 ? x1 : x2; c[2] = y1 < y2 ? y2 : y1; c[3] = x1 < x2 ? x2 : x1;
  }
}

static double kiln_nms_iou(const double* a, const double* b) {
  double h = (a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]);
  double w = (a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]);
  double inter = (h > 0 ? h : 0) * (w > 0 ? w : 0);
  double aa = (a[2] - a[0]) * (a[3] - a[1]), ab = (b[2] - b[0]) * (b[3] - b[1]), uni = aa + ab - inter;
  return aa > 0 && ab > 0 && uni > 0 && inter > 0 ? inter / uni : 0.0;
}

static int32_t kiln_non_max_suppression(const kiln_tensor_t* boxes, const kiln_tensor_t* scores,
                                        const kiln_tensor_t* max_output, const kiln_tensor_t* iou_threshold,
                                        const kiln_tensor_t* score_threshold, kiln_tensor_t* out,
                                        int64_t center_point_box) {
  if (boxes->ndim != 3 || scores->ndim != 3 || boxes->shape[2] != 4) return KILN_ERR_BAD_ARG;
  int64_t nb = scores->shape[0], nc = scores->shape[1], n = scores->shape[2];
  if (boxes->shape[0] != nb || boxes->shape[1] != n) return KILN_ERR_BAD_ARG;
  int64_t limit = kiln_rt_numel(max_output) ? ((const int64_t*)max_output->data)[0] : 0;
  double iou = kiln_rt_numel(iou_threshold) ? ((const float*)iou_threshold->data)[0] : 0.0;
  int has_thresh = kiln_rt_numel(score_threshold) > 0;
  float thresh = has_thresh ? ((const float*)score_threshold->data)[0] : 0.0f;
  limit = limit < 0 ? 0 : limit;
  int64_t m = n > 0 ? n : 1, rows = 0, cap = out->shape[0];
  double* corners = (double*)malloc((size_t)m * 4 * sizeof(double));
  int64_t* buf = (int64_t*)malloc((size_t)m * 2 * sizeof(int64_t));
  int32_t rc = corners && buf ? KILN_OK : KILN_ERR_ALLOC;
  int64_t *order = buf, *kept = buf + m, *o = (int64_t*)out->data;
  for (int64_t b = 0; rc == KILN_OK && b < nb; ++b) {
    for (int64_t i = 0; i < n; ++i)
      kiln_nms_corners((const float*)boxes->data + (b * n + i) * 4, (int)center_point_box, corners + 4 * i);
    for (int64_t c = 0; rc == KILN_OK && c < nc; ++c) {
      kiln_nms_ctx ctx = {(const float*)scores->data + (b * nc + c) * n};
      rc = kiln_argsort(order, n, kiln_nms_cmp, &ctx);
      int64_t nk = 0;
      for (int64_t j = 0; rc == KILN_OK && j < n && nk < limit; ++j) {
        int64_t i = order[j];
        if (has_thresh && !(ctx.s[i] > thresh)) continue;
        int keep = 1;
        for (int64_t t = 0; t < nk && keep; ++t) keep = !(kiln_nms_iou(corners + 4 * i, corners + 4 * kept[t]) > iou);
        if (!keep) continue;
        if (rows >= cap) { rc = KILN_ERR_BAD_ARG; break; }
        kept[nk++] = i;
        o[rows * 3] = b; o[rows * 3 + 1] = c; o[rows * 3 + 2] = i;
        ++rows;
      }
    }
  }
  if (rc == KILN_OK) out->shape[0] = rows;
  free(corners);
  free(buf);
  return rc;
}

/*
 * Layout arithmetic: element counts and reach, overflow-checked because the
 * numbers come from callers (common.h).
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

int tpc_add_ok(int64_t a, int64_t b, int64_t *r) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
    return 0;
  *r = a + b;
  return 1;
}

/* CERT INT32-C. */
int tpc_mul_ok(int64_t a, int64_t b, int64_t *r) {
  if (a > 0) {
    if (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
      return 0;
  } else if (b > 0) {
    if (a < INT64_MIN / b)
      return 0;
  } else if (a != 0 && b < INT64_MAX / a) {
    return 0;
  }
  *r = a * b;
  return 1;
}

void tpc_format_shape(const tyto_plugin_layout *l, char *buf, size_t size) {
  size_t used = 0;
  uint32_t rank = l->rank <= TYTO_PLUGIN_MAX_RANK ? l->rank : 0;
  buf[0] = '\0';
  int w = snprintf(buf, size, "[");
  for (uint32_t k = 0; w >= 0 && k < rank; k++) {
    used += (size_t)w;
    if (used >= size)
      return;
    w = snprintf(buf + used, size - used, "%s%lld", k ? ", " : "",
                 (long long)l->shape[k]);
  }
  if (w >= 0 && (used += (size_t)w) < size)
    snprintf(buf + used, size - used, "]");
}

const char *tpc_format_extents(const int64_t *shape, uint32_t rank, char *buf,
                               size_t size) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.rank = rank;
  memcpy(l.shape, shape, rank * sizeof shape[0]);
  tpc_format_shape(&l, buf, size);
  return buf;
}

int tpc_dense(const tyto_plugin_layout *l) {
  int64_t want = 1;
  for (uint32_t i = l->rank; i-- > 0;) {
    if (l->shape[i] != 1 && l->strides[i] != want)
      return 0;
    want *= l->shape[i];
  }
  return 1;
}

void tpc_format_shape_as(const tyto_plugin_layout *l, int tight, char *buf,
                         size_t size) {
  if (!tight) {
    tpc_format_shape(l, buf, size);
    return;
  }
  size_t used = 0;
  used += (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < l->rank && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "",
                             (long long)l->shape[i]);
  if (used < size)
    snprintf(buf + used, size - used, "]");
}

int tpc_layout_extent(const tyto_plugin_layout *l, const char *which,
                      int64_t *n, int64_t *lo, int64_t *hi, char *why,
                      size_t why_size) {
  int64_t count = 1, low = l->offset, high = l->offset;
  if (l->rank > TYTO_PLUGIN_MAX_RANK) {
    snprintf(why, why_size, "%s rank %u exceeds the maximum of %d", which,
             (unsigned)l->rank, TYTO_PLUGIN_MAX_RANK);
    return 0;
  }
  for (uint32_t k = 0; k < l->rank; k++)
    if (l->shape[k] < 0) {
      snprintf(why, why_size, "%s dimension %u has negative size %lld", which,
               (unsigned)k, (long long)l->shape[k]);
      return 0;
    } else if (l->shape[k] == 0) {
      count = 0;
    }
  for (uint32_t k = 0; k < l->rank && count > 0; k++) {
    int64_t span;
    if (!tpc_mul_ok(count, l->shape[k], &count) ||
        !tpc_mul_ok(l->shape[k] - 1, l->strides[k], &span) ||
        !tpc_add_ok(span < 0 ? low : high, span, span < 0 ? &low : &high)) {
      snprintf(why, why_size,
               "%s layout overflows 64-bit element arithmetic at dimension "
               "%u (size %lld, stride %lld, offset %lld)",
               which, (unsigned)k, (long long)l->shape[k],
               (long long)l->strides[k], (long long)l->offset);
      return 0;
    }
  }
  *n = count;
  *lo = low;
  *hi = high;
  return 1;
}

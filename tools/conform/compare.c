/*
 * Random inputs and the comparison of tyto-conform (see compare.h).
 */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

/* splitmix64 (Steele, Lea, Flood 2014): a small generator whose stream
 * depends only on the seed, so every run draws the same inputs. */
static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) {
  return (double)(next(s) >> 11) * 0x1.0p-53;
}

static void store(uint32_t dtype, void *p, int64_t i, double v) {
  if (dtype == TYTO_PLUGIN_DTYPE_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

int cf_values_make(const cf_case *c, uint64_t seed, void **in, void **out) {
  const size_t es = cf_dtype_size(c->dtype);
  uint64_t s = seed;
  int bad = 0;
  for (uint32_t i = 0; i < CF_MAX_IN; i++)
    in[i] = NULL;
  for (uint32_t i = 0; i < CF_MAX_OUT; i++)
    out[i] = NULL;
  for (uint32_t i = 0; i < c->n_in; i++) {
    const cf_tensor *t = &c->in[i];
    in[i] = malloc((size_t)(t->storage ? t->storage : 1) * es);
    if (in[i] == NULL) {
      bad = 1;
      continue;
    }
    for (int64_t j = 0; j < t->storage; j++) {
      double u = uniform(&s), v;
      if (t->values == CF_WHOLE)
        v = floor(t->lo + u * (t->hi - t->lo + 1));
      else
        v = t->lo + u * (t->hi - t->lo);
      store(c->dtype, in[i], j, v);
    }
  }
  for (uint32_t i = 0; i < c->n_out; i++) {
    const cf_tensor *t = &c->out[i];
    out[i] = malloc((size_t)(t->storage ? t->storage : 1) * es);
    if (out[i] == NULL) {
      bad = 1;
      continue;
    }
    /* A value no op of the catalogue produces from these inputs: an
     * element left unwritten shows up against the reference. */
    for (int64_t j = 0; j < t->storage; j++)
      store(c->dtype, out[i], j, -777.0);
  }
  if (bad)
    cf_values_free(in, out);
  return bad ? -1 : 0;
}

void cf_values_free(void **in, void **out) {
  for (uint32_t i = 0; i < CF_MAX_IN; i++) {
    free(in[i]);
    in[i] = NULL;
  }
  for (uint32_t i = 0; i < CF_MAX_OUT; i++) {
    free(out[i]);
    out[i] = NULL;
  }
}

void cf_compare(const cf_case *c, double *const *got, double *const *want,
                cf_cmp *r) {
  memset(r, 0, sizeof *r);
  for (uint32_t o = 0; o < c->n_out; o++)
    for (int64_t i = 0; i < c->out[o].storage; i++) {
      const double g = got[o][i], w = want[o][i];
      if (!isfinite(g) || !isfinite(w)) {
        int same = (isnan(g) && isnan(w)) || (isinf(g) && g == w);
        if (!same && r->specials++ == 0) {
          r->sp_out = o;
          r->sp_at = i;
          r->sp_got = g;
          r->sp_want = w;
        }
        continue;
      }
      double err = fabs(g - w) / (c->atol + c->rtol * fabs(w));
      if (err > r->max_err) {
        r->max_err = err;
        r->out = o;
        r->at = i;
        r->got = g;
        r->want = w;
      }
    }
}

int cf_cmp_pass(const cf_cmp *r) {
  return r->max_err <= 1.0 && !r->specials;
}
